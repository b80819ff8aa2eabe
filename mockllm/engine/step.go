package engine

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// stepScheduler is the "engine" mode: one loop that forms a batch per step
// the way vLLM V1's scheduler does, sleeps until the step's end on the
// Clock, and starts the next step at exactly that end.
//
// Each step, running sequences are served first in admission order (so
// decodes get the token budget before new prompts), a sequence that needs
// more KV blocks than are free preempts the most recently admitted one
// (recompute: it loses its cache and waits again at the head of the queue),
// and waiting requests are admitted FCFS while slots, budget and blocks
// last. A prompt longer than the remaining budget prefills over several
// steps (chunked prefill). A sequence samples a token at the end of every
// step that brings its computed tokens up to its length, i.e. once per
// step after its prefill.
//
// Tokens are published to their streams as soon as the step is formed,
// with Due at the step's end, so the HTTP layer's own timer meets the due
// time instead of waiting for this loop to wake up.
type stepScheduler struct {
	p     Profile
	clock Clock
	epoch time.Time // time origin; all loop times are ns since epoch

	// Step cost coefficients in ns.
	b0, b1, b2, b3 float64

	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}
	kick   chan struct{} // wakes an idle loop; capacity 1

	// mu guards everything below; the loop holds it while forming and
	// retiring a step, never while sleeping.
	mu       sync.Mutex
	closed   bool
	inbox    []*seq // arrivals the loop has not taken yet
	waiting  []*seq // FCFS; waiting[wHead:] are live
	wHead    int
	running  []*seq // admission order
	batch    []*seq // sequences scheduled in the current step
	free     int    // free KV blocks
	warm     bool   // the cold start has been paid
	lastEnd  int64  // end of the last step
	nWaiting int    // live waiting requests, inbox included (abandoned excluded)

	statRunning atomic.Int64
	statWaiting atomic.Int64
	statUsed    atomic.Int64 // KV blocks in use
	preemptions atomic.Uint64
	prompt      atomic.Uint64
	decoded     atomic.Uint64
	steps       atomic.Uint64

	// GPU model: the step being run (start and per-token share, loop
	// state under mu) and the activity ring the gauges read.
	gpu          GPUModel
	act          *activity
	stepStart    int64
	stepCompute  float64
	kvBlockBytes float64
}

// Sequence states, guarded by stepScheduler.mu.
const (
	seqWaiting = iota
	seqRunning
	seqDone
)

// seq is one request inside the step scheduler, and its Stream.
type seq struct {
	e       *stepScheduler
	id      string
	prompt  int
	output  int
	arrival int64

	// Loop state, guarded by e.mu.
	state      int
	computed   int  // tokens whose KV is in the cache
	generated  int  // tokens sampled (published) so far
	blocks     int  // KV blocks held
	prefilling bool // admitted (or readmitted) and not yet sampled
	newTokens  int  // tokens scheduled in the current step
	admitted   bool // has left the queue at least once
	abandoned  bool // the stream was closed; free at the next step

	// Consumer state, guarded by mu.
	mu       sync.Mutex
	dues     []int64 // due times of published, unread tokens (ns since epoch)
	head     int
	buf      [4]int64 // backing store for dues while the reader keeps up
	next     int      // index of the next token Next returns
	finished bool     // every token has been published
	err      error
	closed   bool
	dequeued int64
	notify   chan struct{} // capacity 1: "something was published"
}

func newStep(p Profile, o options) *stepScheduler {
	e := newStepCore(p, o)
	go e.loop()
	return e
}

// newStepCore builds the scheduler without starting its loop.
func newStepCore(p Profile, o options) *stepScheduler {
	ctx, cancel := context.WithCancel(context.Background())
	const usPerNS = 1e3
	e := &stepScheduler{
		p:      p,
		clock:  o.clock,
		epoch:  o.clock.Now(),
		b0:     p.Beta0US * usPerNS,
		b1:     p.Beta1US * usPerNS,
		b2:     p.Beta2US * usPerNS,
		b3:     p.Beta3US * usPerNS,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
		free:   p.KVCacheBlocks,
		batch:  make([]*seq, 0, p.MaxNumSeqs),
		gpu:    p.GPU.withDefaults(),
		act:    newActivity(),
	}
	e.kvBlockBytes = e.gpu.KVBytesPerToken * float64(p.BlockSize)
	return e
}

// since converts a clock reading to ns since the epoch.
func (e *stepScheduler) since(t time.Time) int64 { return int64(t.Sub(e.epoch)) }

// at converts ns since the epoch to a time carrying the clock's monotonic reading.
func (e *stepScheduler) at(ns int64) time.Time { return e.epoch.Add(time.Duration(ns)) }

// Start queues req. It fails with ErrQueueFull at MaxWaiting, ErrTooLong
// above MaxModelLen, and ErrClosed after Close.
func (e *stepScheduler) Start(ctx context.Context, req Request) (Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkRequest(e.p, req, 1); err != nil {
		return nil, err
	}
	s := &seq{e: e, id: req.ID, prompt: req.PromptTokens, output: req.OutputTokens, notify: make(chan struct{}, 1)}
	s.dues = s.buf[:0]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	s.arrival = e.since(e.clock.Now())
	if req.OutputTokens == 0 {
		// Nothing to generate: vLLM would reject it, the HTTP layer may not.
		s.state = seqDone
		s.finished = true
		s.dequeued = s.arrival
		return s, nil
	}
	if e.p.MaxWaiting > 0 && e.nWaiting >= e.p.MaxWaiting {
		return nil, ErrQueueFull
	}
	e.inbox = append(e.inbox, s)
	e.nWaiting++
	e.statWaiting.Store(int64(e.nWaiting))
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return s, nil
}

// Stats returns the counters of the last formed step.
func (e *stepScheduler) Stats() Stats {
	return Stats{
		Running:       int(e.statRunning.Load()),
		Waiting:       int(e.statWaiting.Load()),
		KVCacheUsage:  float64(e.statUsed.Load()) / float64(e.p.KVCacheBlocks),
		Preemptions:   e.preemptions.Load(),
		PromptTokens:  e.prompt.Load(),
		DecodedTokens: e.decoded.Load(),
	}
}

// GPU returns the modelled GPU's state over the last ActivityWindow.
func (e *stepScheduler) GPU() GPUState {
	busy, compute := e.act.window(e.since(e.clock.Now()))
	kv := float64(e.statUsed.Load()) * e.kvBlockBytes
	return gpuState(e.gpu, busy, compute, kv)
}

// Close stops the loop and fails every unfinished stream with ErrClosed.
func (e *stepScheduler) Close() {
	e.cancel()
	<-e.done
}

// loop runs steps until Close.
func (e *stepScheduler) loop() {
	defer close(e.done)
	defer e.shutdown()
	var now int64
	for {
		e.mu.Lock()
		e.takeInbox()
		e.dropAbandoned()
		if len(e.running) == 0 {
			head := e.waitingHead()
			if head == nil {
				e.mu.Unlock()
				select {
				case <-e.kick:
				case <-e.ctx.Done():
					return
				}
				now = max(now, e.since(e.clock.Now()))
				continue
			}
			// The loop may be behind the clock; never start before the arrival.
			now = max(now, head.arrival)
			if !e.warm || (e.p.IdleTimeout > 0 && now-e.lastEnd >= int64(e.p.IdleTimeout)) {
				e.warm = true
				if e.p.ColdStart > 0 {
					// Loading counts as activity, so the idle test passes next time.
					now += int64(e.p.ColdStart)
					e.lastEnd = now
					e.mu.Unlock()
					if e.clock.SleepUntil(e.ctx, e.at(now)) != nil {
						return
					}
					continue
				}
			}
		}
		end := e.form(now)
		e.mu.Unlock()
		if end == now {
			continue
		}
		if e.clock.SleepUntil(e.ctx, e.at(end)) != nil {
			return
		}
		e.mu.Lock()
		e.retire(end)
		e.mu.Unlock()
		now = end
	}
}

// takeInbox moves new arrivals to the waiting queue.
func (e *stepScheduler) takeInbox() {
	e.waiting = append(e.waiting, e.inbox...)
	clear(e.inbox)
	e.inbox = e.inbox[:0]
}

// waitingHead returns the first live waiting sequence, discarding
// abandoned ones in front of it.
func (e *stepScheduler) waitingHead() *seq {
	for e.wHead < len(e.waiting) {
		s := e.waiting[e.wHead]
		if !s.abandoned {
			return s
		}
		e.popWaiting()
	}
	return nil
}

func (e *stepScheduler) popWaiting() {
	e.waiting[e.wHead] = nil
	e.wHead++
	if e.wHead == len(e.waiting) {
		e.waiting, e.wHead = e.waiting[:0], 0
	} else if e.wHead >= 1024 && e.wHead*2 >= len(e.waiting) {
		n := copy(e.waiting, e.waiting[e.wHead:])
		clear(e.waiting[n:])
		e.waiting, e.wHead = e.waiting[:n], 0
	}
}

// pushWaitingFront requeues a preempted sequence ahead of everyone.
func (e *stepScheduler) pushWaitingFront(s *seq) {
	if e.wHead > 0 {
		e.wHead--
		e.waiting[e.wHead] = s
		return
	}
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = s
}

// dropAbandoned frees the slots and blocks of running sequences whose
// streams were closed.
func (e *stepScheduler) dropAbandoned() {
	kept := e.running[:0]
	for _, s := range e.running {
		if s.abandoned {
			e.free += s.blocks
			s.blocks, s.state = 0, seqDone
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// form schedules the step starting at now, publishes the tokens it will
// sample, and returns the step's end.
func (e *stepScheduler) form(now int64) int64 {
	budget := e.p.MaxNumBatchedTokens
	bs := e.p.BlockSize
	e.batch = e.batch[:0]
	preempted := false

	// Running sequences first, in admission order.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.prompt+s.generated-s.computed, budget)
		grow := ceilDiv(s.computed+n, bs) - s.blocks
		for grow > e.free {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if s.state != seqRunning {
			break // s preempted itself: everything after it already went
		}
		e.free -= grow
		s.blocks += grow
		s.newTokens = n
		budget -= n
		e.batch = append(e.batch, s)
	}

	// Then waiting requests, FCFS, unless this step had to preempt.
	for !preempted && len(e.running) < e.p.MaxNumSeqs && budget > 0 {
		s := e.waitingHead()
		if s == nil || s.arrival > now {
			break
		}
		n := min(s.prompt+s.generated, budget)
		need := ceilDiv(n, bs)
		if need > e.free {
			break // head-of-line blocking, as in vLLM's FCFS policy
		}
		e.popWaiting()
		e.nWaiting--
		e.free -= need
		s.blocks = need
		s.state = seqRunning
		s.prefilling = true
		s.newTokens = n
		budget -= n
		e.running = append(e.running, s)
		e.batch = append(e.batch, s)
		if !s.admitted {
			s.admitted = true
			s.mu.Lock()
			s.dequeued = now
			s.mu.Unlock()
		}
	}

	// Cost of the step.
	var prefill, decode, context int
	for _, s := range e.batch {
		if s.prefilling {
			prefill += s.newTokens
		} else {
			decode += s.newTokens
		}
		context += s.computed + s.newTokens
	}
	end := now + e.stepNS(prefill, decode, context)
	e.stepStart = now
	if end > now {
		e.stepCompute = max(float64(end-now)-e.b0, 0) / float64(end-now)
	}

	if len(e.batch) == 0 {
		// Only after the sole running sequence preempted itself: nothing
		// runs, and the next step (at the same instant) readmits it.
		return now
	}

	// Publish the tokens sampled at the end of the step.
	var sampled uint64
	for _, s := range e.batch {
		if s.computed+s.newTokens < s.prompt+s.generated {
			continue // prefill continues next step
		}
		if s.prefilling && s.generated == 0 {
			e.prompt.Add(uint64(s.prompt))
		}
		s.prefilling = false
		s.generated++
		sampled++
		s.publish(end, s.generated == s.output)
	}
	e.decoded.Add(sampled)
	e.statRunning.Store(int64(len(e.running)))
	e.statWaiting.Store(int64(e.nWaiting))
	e.statUsed.Store(int64(e.p.KVCacheBlocks - e.free))
	e.steps.Add(1)
	return end
}

// stepNS is the step-time model in ns: β0 + β1·prefill + β2·decode + β3·context.
func (e *stepScheduler) stepNS(prefill, decode, context int) int64 {
	d := e.b0 + e.b1*float64(prefill) + e.b2*float64(decode) + e.b3*float64(context)
	return max(1, int64(math.Round(d)))
}

// preempt evicts s (the last running sequence) by recompute: its blocks
// are freed and it waits at the head of the queue to prefill its prompt
// plus the tokens generated so far.
func (e *stepScheduler) preempt(s *seq) {
	e.running[len(e.running)-1] = nil
	e.running = e.running[:len(e.running)-1]
	e.free += s.blocks
	s.blocks = 0
	s.computed = 0
	s.state = seqWaiting
	s.prefilling = false
	e.pushWaitingFront(s)
	e.nWaiting++
	e.preemptions.Add(1)
}

// retire applies the step that ended at end: computed tokens enter the
// cache, finished sequences leave the batch and free their blocks.
func (e *stepScheduler) retire(end int64) {
	e.act.add(e.stepStart, end, e.stepCompute)
	for _, s := range e.batch {
		s.computed += s.newTokens
		s.newTokens = 0
	}
	clear(e.batch)
	e.batch = e.batch[:0]
	kept := e.running[:0]
	for _, s := range e.running {
		if s.generated == s.output || s.abandoned {
			e.free += s.blocks
			s.blocks, s.state = 0, seqDone
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
	e.lastEnd = end
	e.statRunning.Store(int64(len(e.running)))
	e.statUsed.Store(int64(e.p.KVCacheBlocks - e.free))
}

// shutdown fails every unfinished stream with ErrClosed.
func (e *stepScheduler) shutdown() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	e.takeInbox()
	for _, list := range [][]*seq{e.running, e.waiting[e.wHead:]} {
		for _, s := range list {
			s.fail(ErrClosed)
		}
	}
}

// publish appends one token due at ns and wakes the reader.
func (s *seq) publish(ns int64, last bool) {
	s.mu.Lock()
	s.dues = append(s.dues, ns)
	s.finished = last
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// fail ends the stream with err.
func (s *seq) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next published token, waiting for the step that
// samples it to be formed.
func (s *seq) Next(ctx context.Context) (Token, bool, error) {
	for {
		s.mu.Lock()
		switch {
		case s.err != nil:
			err := s.err
			s.mu.Unlock()
			return Token{}, false, err
		case s.closed:
			s.mu.Unlock()
			return Token{}, false, ErrClosed
		case s.head < len(s.dues):
			due := s.dues[s.head]
			s.head++
			if s.head == len(s.dues) {
				s.dues, s.head = s.dues[:0], 0
			}
			i := s.next
			s.next++
			s.mu.Unlock()
			return Token{Index: i, Due: s.e.at(due)}, true, nil
		case s.finished:
			s.mu.Unlock()
			return Token{}, false, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Token{}, false, ctx.Err()
		}
	}
}

// Dequeued is the start of the step that first admitted the request.
func (s *seq) Dequeued() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e.at(s.dequeued)
}

// Close abandons the request: a waiting one leaves the queue now, a
// running one frees its slot and blocks at the next step.
func (s *seq) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s.state {
	case seqWaiting:
		if !s.abandoned {
			s.abandoned = true
			e.nWaiting--
			e.statWaiting.Store(int64(e.nWaiting))
		}
	case seqRunning:
		s.abandoned = true
	}
}
