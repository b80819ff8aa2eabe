package engine

import (
	"container/heap"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// SimLoad is a load to replay against a profile in virtual time.
type SimLoad struct {
	// Concurrency > 0 runs a closed loop: that many clients, each sending
	// its next request (in the order of Requests) when the last token of
	// its previous one arrives. 0 sends every request at its At.
	Concurrency int
	Requests    []SimRequest
	// Delay is the one-way time between client and server: a request
	// arrives Delay after it is sent and the client sees a token Delay
	// after it is due.
	Delay time.Duration
}

// SimRequest is one request of a SimLoad.
type SimRequest struct {
	Request
	At time.Duration // send time, from the start (open loop only)
}

// SimResult is one request as the client would have seen it.
type SimResult struct {
	Sent time.Duration   // from the start
	TTFT time.Duration   // from the send to the first token seen
	Gaps []time.Duration // between consecutive tokens seen
}

// Simulate replays load against p in virtual time, instantly, and returns
// what a client would have measured, in the order of load.Requests. It is
// how the mock's models predict a run: `testbed fit` scores each candidate
// profile by the steps of a run it did not fit on. The engine mode runs
// the step loop synchronously; a cold start is not simulated.
func Simulate(p Profile, load SimLoad, opts ...Option) ([]SimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t0 := time.Unix(0, 0)
	vc := NewVirtualClock(t0)
	o := options{clock: vc}
	for _, opt := range opts {
		opt(&o)
	}
	o.clock = vc
	sim := &simulation{load: load, vc: vc, t0: t0, out: make([]SimResult, len(load.Requests)),
		streams: make([]Stream, len(load.Requests))}
	sim.queueSends()
	var err error
	switch p.Mode {
	case ModeEngine:
		p.ColdStart = 0
		e := newStepCore(p, o)
		defer e.cancel()
		err = sim.runStep(e)
	default:
		s := newFixed(p, o)
		defer s.Close()
		err = sim.runFixed(s)
	}
	if err != nil {
		return nil, err
	}
	return sim.out, nil
}

// simulation is the state of one Simulate call.
type simulation struct {
	load    SimLoad
	vc      *VirtualClock
	t0      time.Time
	events  eventHeap
	seq     int
	out     []SimResult
	streams []Stream
	last    []time.Duration // due of each request's last token so far
	nextReq int             // closed loop: next request to send
}

// queueSends schedules the first arrivals.
func (m *simulation) queueSends() {
	m.last = make([]time.Duration, len(m.load.Requests))
	if m.load.Concurrency <= 0 {
		for i, r := range m.load.Requests {
			m.send(i, r.At)
		}
		m.nextReq = len(m.load.Requests)
		return
	}
	for range min(m.load.Concurrency, len(m.load.Requests)) {
		m.send(m.nextReq, 0)
		m.nextReq++
	}
}

// send records request i as sent at t and schedules its arrival.
func (m *simulation) send(i int, t time.Duration) {
	m.out[i].Sent = t
	m.push(event{at: t + m.load.Delay, req: i, arrive: true})
}

func (m *simulation) push(e event) {
	m.seq++
	e.seq = m.seq
	heap.Push(&m.events, e)
}

// arrive starts request i on sched at the clock's time.
func (m *simulation) arrive(sched Scheduler, i int) error {
	req := m.load.Requests[i].Request
	req.OutputTokens = max(req.OutputTokens, 1)
	if req.ID == "" {
		req.ID = fmt.Sprintf("sim-%d", i)
	}
	st, err := sched.Start(context.Background(), req)
	if err != nil {
		return fmt.Errorf("simulate: request %d: %w", i, err)
	}
	m.streams[i] = st
	return nil
}

// token books a token of request i due at due (from the start).
func (m *simulation) token(i, index int, due time.Duration) {
	seen := due + m.load.Delay
	if index == 0 {
		m.out[i].TTFT = seen - m.out[i].Sent
	} else {
		m.out[i].Gaps = append(m.out[i].Gaps, due-m.last[i])
	}
	m.last[i] = due
}

// done closes request i, whose last token was due at due; in a closed
// loop its client sends the next request when it sees that token.
func (m *simulation) done(i int, due time.Duration) {
	m.streams[i].Close()
	if m.load.Concurrency > 0 && m.nextReq < len(m.load.Requests) {
		m.send(m.nextReq, due+m.load.Delay)
		m.nextReq++
	}
}

// runFixed drives a scheduler whose Next never blocks (fixed, load_curve):
// every arrival and token is an event, handled in time order, each at its
// own time on the clock, as the mock would call Next after each write.
func (m *simulation) runFixed(s *fixedScheduler) error {
	ctx := context.Background()
	for m.events.Len() > 0 {
		ev := heap.Pop(&m.events).(event)
		m.vc.AdvanceTo(m.t0.Add(ev.at))
		i := ev.req
		if ev.arrive {
			if err := m.arrive(s, i); err != nil {
				return err
			}
		} else {
			m.token(i, ev.index, ev.at)
		}
		tok, ok, err := m.streams[i].Next(ctx)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		if !ok {
			m.done(i, ev.at)
			continue
		}
		m.push(event{at: tok.Due.Sub(m.t0), req: i, index: tok.Index})
	}
	return nil
}

// runStep runs the step loop synchronously: form a step, read the tokens
// it published, let the sends that fall within it arrive, retire it.
// Requests arriving during a step join the next one, as in the loop.
func (m *simulation) runStep(e *stepScheduler) error {
	var now int64
	active := map[int]*seq{}
	for {
		if err := m.arriveUntil(e, now, true, active); err != nil {
			return err
		}
		e.mu.Lock()
		e.takeInbox()
		e.dropAbandoned()
		if len(e.running) == 0 {
			head := e.waitingHead()
			if head == nil {
				e.mu.Unlock()
				if m.events.Len() == 0 {
					return nil
				}
				now = max(now, int64(m.events[0].at))
				continue
			}
			now = max(now, head.arrival)
		}
		end := e.form(now)
		e.mu.Unlock()
		if end == now {
			continue
		}
		m.readPublished(active)
		if err := m.arriveUntil(e, end, false, active); err != nil {
			return err
		}
		m.vc.AdvanceTo(m.t0.Add(time.Duration(end)))
		e.mu.Lock()
		e.retire(end)
		e.mu.Unlock()
		now = end
	}
}

// arriveUntil starts the requests arriving before t (at t too when
// inclusive).
func (m *simulation) arriveUntil(e *stepScheduler, t int64, inclusive bool, active map[int]*seq) error {
	for m.events.Len() > 0 {
		at := int64(m.events[0].at)
		if at > t || (at == t && !inclusive) {
			return nil
		}
		ev := heap.Pop(&m.events).(event)
		m.vc.AdvanceTo(m.t0.Add(ev.at))
		if err := m.arrive(e, ev.req); err != nil {
			return err
		}
		active[ev.req] = m.streams[ev.req].(*seq)
	}
	return nil
}

// readPublished books every token the last formed step published.
func (m *simulation) readPublished(active map[int]*seq) {
	ctx := context.Background()
	for _, i := range slices.Sorted(maps.Keys(active)) { // in request order, so the run is deterministic
		s := active[i]
		for s.ready() {
			tok, ok, err := s.Next(ctx)
			if err != nil || !ok {
				delete(active, i)
				m.done(i, m.last[i])
				break
			}
			m.token(i, tok.Index, tok.Due.Sub(m.t0))
		}
	}
}

// ready reports whether Next would return without waiting.
func (s *seq) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head < len(s.dues) || s.finished || s.err != nil || s.closed
}

// event is an arrival or a token due, ordered by time, then by when it
// was scheduled.
type event struct {
	at     time.Duration
	seq    int
	req    int
	index  int
	arrive bool
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].at != h[b].at {
		return h[a].at < h[b].at
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
