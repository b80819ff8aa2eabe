package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/wake"
)

// Result is what Run returns; the same data is in the results directory.
type Result struct {
	Dir         string
	Info        results.RunInfo[Plan]
	Summary     results.Summary
	Interrupted bool // the context ended before the plan did
}

// Run executes plan and writes requests.jsonl, run.json and summary.json
// into outDir. When ctx ends (Ctrl-C), Run stops scheduling, gives
// in-flight requests the plan's grace period, records the rest as
// cancelled and still writes every file; Result.Interrupted says so.
// An unreachable target fails the run before any load is sent.
func Run(ctx context.Context, plan Plan, outDir string, opts ...RunOption) (*Result, error) {
	var o runOptions
	for _, f := range opts {
		f(&o)
	}
	plan.SetDefaults()
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	if err := calibrateContext(ctx, &plan); err != nil { // scenario_calibrate.go: long-context prompts sized for the server's tokenizer
		return nil, err
	}
	steps := plan.Steps()
	var prompts []Prompt
	if plan.Dataset.Prompts != "" {
		var err error
		if prompts, err = LoadPrompts(plan.Dataset.Prompts, plan.Dataset.PromptFormat); err != nil {
			return nil, err
		}
	}
	t0 := o.start
	if t0.IsZero() {
		t0 = time.Now()
	}
	maxConns := 0
	for _, s := range steps {
		maxConns = max(maxConns, s.Concurrency, s.MaxInFlight)
		if s.Rate > 0 && s.MaxInFlight == 0 {
			// In flight = rate × latency: room for latencies up to 10 s.
			maxConns = max(maxConns, 1024, int(s.Rate*10))
		}
	}
	clients := map[string]*client{}
	for _, s := range steps {
		key := s.Target.Name + "|" + s.Connection
		if clients[key] != nil {
			continue
		}
		c, err := newClient(&plan, s.Target, s.Connection, t0, maxConns)
		if err != nil {
			return nil, err
		}
		defer c.tr.CloseIdleConnections()
		clients[key] = c
	}
	for _, t := range plan.Targets {
		pc, err := newClient(&plan, t, "new", t0, 1)
		if err != nil {
			return nil, err
		}
		if err := pc.preflight(ctx); err != nil {
			return nil, fmt.Errorf("preflight: %w", err)
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(outDir, results.RecordsFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info := results.RunInfo[Plan]{FormatVersion: results.FormatVersion, RunID: newRunID(), Version: o.version, Seed: plan.Seed, Plan: plan, Start: t0, Host: HostFacts(ctx)}
	if info.Version == "" {
		info.Version = "dev"
	}
	if err := results.WriteJSON(filepath.Join(outDir, results.RunFile), info); err != nil {
		return nil, err
	}

	r := &runner{plan: &plan, clients: clients, prompts: prompts, t0: t0, runID: info.RunID, out: make(chan msg, 8192)}
	w := results.NewLineWriter[results.Record](f)
	writerDone := make(chan error, 1)
	go func() { writerDone <- r.writeLoop(w, plan.SLO) }()

	// hard ends in-flight requests: the grace period after ctx ends.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			t := time.NewTimer(plan.Timeouts.Grace.D())
			defer t.Stop()
			select {
			case <-t.C:
				hardCancel()
			case <-finished:
			}
		case <-finished:
		}
	}()
	stopProgress := r.progressLoop(o, len(steps))

	for _, st := range steps {
		if ctx.Err() != nil {
			break
		}
		r.step.Store(int64(st.Index))
		r.label.Store(st.Label())
		r.planned.Store(int64(st.Requests + st.Warmup))
		if st.Requests == 0 {
			r.planned.Store(0)
		}
		r.sent.Store(0)
		r.done.Store(0)
		r.errs.Store(0)
		r.stepStart.Store(r.since())
		si := StepInfo{Index: st.Index, Target: st.Target.Name, Scenario: st.Scenario, Concurrency: st.Concurrency, Rate: st.Rate, Start: time.Now()}
		for _, m := range o.monitors {
			m.StepStarted(si)
		}
		r.runStep(ctx, hard, st)
		si.End = time.Now()
		lagReply := make(chan time.Duration, 1)
		r.out <- msg{lag: &lagQuery{index: st.Index, reply: lagReply}}
		si.ScheduleLagP99 = <-lagReply
		end := stepEnd{index: st.Index}
		for _, m := range o.monitors {
			if bound, reason := m.StepEnded(si); bound {
				end.bound = true
				if end.reason != "" {
					end.reason += "; "
				}
				end.reason += reason
			}
		}
		r.out <- msg{end: &end}
	}
	close(finished)
	stopProgress()
	close(r.out)
	werr := <-writerDone

	info.End = time.Now()
	info.Interrupted = ctx.Err() != nil
	info.Records = w.Lines()
	res := &Result{Dir: outDir, Info: info, Summary: results.Summary{Steps: r.summaries}, Interrupted: info.Interrupted}
	if res.Summary.Steps == nil {
		res.Summary.Steps = []results.StepSummary{}
	}
	errs := []error{werr}
	errs = append(errs, results.WriteJSON(filepath.Join(outDir, results.RunFile), info))
	errs = append(errs, results.WriteJSON(filepath.Join(outDir, results.SummaryFile), res.Summary))
	// Close here, not only in the deferred call, so that an error closing
	// the records file reaches the caller; the deferred Close then only
	// covers the early returns.
	errs = append(errs, f.Sync(), f.Close())
	return res, errors.Join(errs...)
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type stepEnd struct {
	index  int
	bound  bool
	reason string
}

// msg goes from the request goroutines to the one writer: a finished
// record, or the end of a step (after all its records).
type msg struct {
	rec *results.Record
	end *stepEnd
	lag *lagQuery
}

// lagQuery asks the writer for a step's schedule-lag p99 (warm-up
// included), for StepMonitor.StepEnded.
type lagQuery struct {
	index int
	reply chan time.Duration
}

type runner struct {
	plan      *Plan
	clients   map[string]*client
	prompts   []Prompt
	t0        time.Time
	runID     string
	out       chan msg
	summaries []results.StepSummary

	step, planned, sent, done, errs, inflight, stepStart atomic.Int64
	label                                                atomic.Value
}

func (r *runner) since() int64 { return int64(time.Since(r.t0)) }

// writeLoop is the only writer of requests.jsonl and the only reader of
// finished records: it encodes each line, feeds the step's aggregate and
// recycles the record. The channel send blocks rather than drop a record.
func (r *runner) writeLoop(w *results.LineWriter[results.Record], slo SLO) error {
	var firstErr error
	var failed int64
	aggs := map[int]*stepAgg{}
	for m := range r.out {
		if m.lag != nil {
			var p99 time.Duration
			if a := aggs[m.lag.index]; a != nil && a.lagAll.n > 0 {
				p99 = time.Duration(a.lagAll.h.ValueAtQuantile(99)) * time.Microsecond
			}
			m.lag.reply <- p99
			continue
		}
		if m.end != nil {
			a := aggs[m.end.index]
			delete(aggs, m.end.index)
			var s results.StepSummary
			if a != nil {
				s = a.summary()
			} else {
				st := r.plan.Steps()[m.end.index]
				s = newStepAgg(slo).summary()
				s.Step, s.Target, s.Scenario, s.Concurrency, s.Rate = st.Index, st.Target.Name, st.Scenario, st.Concurrency, st.Rate
				s.Warnings = append(s.Warnings, "no request ran in this step")
			}
			s.ClientBound, s.ClientBoundReason = m.end.bound, m.end.reason
			r.summaries = append(r.summaries, s)
			if err := w.Flush(); err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		rec := m.rec
		if err := w.Write(rec); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
		a := aggs[rec.Step]
		if a == nil {
			a = newStepAgg(slo)
			aggs[rec.Step] = a
		}
		a.add(rec)
		putRecord(rec)
		if len(r.out) == 0 {
			if err := w.Flush(); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	if err := w.Flush(); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return fmt.Errorf("%s: %d records not written: %w", results.RecordsFile, failed, firstErr)
	}
	return nil
}

var recordPool = sync.Pool{New: func() any { return new(results.Record) }}

// getRecord returns a cleared record whose chunk-gap slice can hold
// maxTokens gaps, so the stream loop does not grow it.
func getRecord(maxTokens int) *results.Record {
	rec := recordPool.Get().(*results.Record)
	gaps := rec.ChunkGapsNS[:0]
	if cap(gaps) < maxTokens {
		gaps = make([]int64, 0, maxTokens)
	}
	*rec = results.Record{ChunkGapsNS: gaps}
	return rec
}

func putRecord(rec *results.Record) {
	if cap(rec.ChunkGapsNS) > 1<<16 {
		return // let unusually large ones go
	}
	recordPool.Put(rec)
}

// newRecord prepares the record of request rq in step st.
func (r *runner) newRecord(st *Step, rq *Request, intended int64) *results.Record {
	rec := getRecord(rq.OutputTokens)
	rec.ID = fmt.Sprintf("%s-%d-%d", r.runID, st.Index, rq.Index)
	rec.Target, rec.Step, rec.Scenario = st.Target.Name, st.Index, st.Scenario
	rec.Concurrency, rec.Rate, rec.API, rec.Stream = st.Concurrency, st.Rate, st.Target.API, st.Stream
	rec.Warmup = rq.Index < st.Warmup
	rec.IntendedNS, rec.NInPlanned, rec.MaxTokens = intended, rq.InputTokens, rq.OutputTokens
	return rec
}

// finish hands a record to the writer.
func (r *runner) finish(rec *results.Record) {
	r.done.Add(1)
	if !rec.OK() {
		r.errs.Add(1)
	}
	r.out <- msg{rec: rec}
}

// failBuild records a request whose body could not be built; it keeps the
// run's record count honest.
func (r *runner) failBuild(st *Step, idx int, intended int64, err error) {
	rec := getRecord(0)
	rec.ID = fmt.Sprintf("%s-%d-%d", r.runID, st.Index, idx)
	rec.Target, rec.Step, rec.Scenario, rec.Concurrency, rec.Rate = st.Target.Name, st.Index, st.Scenario, st.Concurrency, st.Rate
	rec.API, rec.Stream, rec.Warmup, rec.IntendedNS, rec.DoneNS = st.Target.API, st.Stream, idx < st.Warmup, intended, r.since()
	rec.ErrorClass, rec.Error = results.ErrOther, err.Error()
	r.finish(rec)
}

func (r *runner) runStep(ctx, hard context.Context, st Step) {
	src := newSource(st, r.prompts, r.plan.IgnoreEOS)
	c := r.clients[st.Target.Name+"|"+st.Connection]
	if st.Rate > 0 {
		r.openLoop(ctx, hard, st, src, c)
	} else {
		r.closedLoop(ctx, hard, st, src, c)
	}
}

// closedLoop runs Concurrency workers, each sending its next request as
// soon as its previous one finished. t_sched is the moment the worker was
// free with its next request built.
func (r *runner) closedLoop(ctx, hard context.Context, st Step, src *source, c *client) {
	total := int64(-1)
	if st.Requests > 0 {
		total = int64(st.Requests + st.Warmup)
	}
	var next atomic.Int64
	var measureEnd atomic.Int64 // ns since t0 when the duration ends; 0 until the first measured request
	var wg sync.WaitGroup
	for range st.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if total >= 0 && i >= total {
					return
				}
				if st.IdleBefore > 0 && !waitIdle(ctx, st.IdleBefore) {
					return // cold-start scenario: nothing in flight for IdleBefore, then send
				}
				rq, err := src.Next()
				if err != nil {
					r.failBuild(&st, int(i), r.since(), err)
					continue
				}
				rq.Index = int(i) // warm-up is decided by send order, not build order
				now := r.since()
				if st.Duration > 0 && i >= int64(st.Warmup) {
					measureEnd.CompareAndSwap(0, now+int64(st.Duration))
					if now >= measureEnd.Load() {
						return
					}
				}
				rec := r.newRecord(&st, rq, now)
				r.sent.Add(1)
				r.inflight.Add(1)
				c.do(hard, rq, rec)
				r.inflight.Add(-1)
				r.finish(rec)
			}
		})
	}
	wg.Wait()
}

// openLoop sends requests at the pacer's times, measured against absolute
// times from the step's start, each in its own goroutine, so a slow
// response never delays the schedule.
func (r *runner) openLoop(ctx, hard context.Context, st Step, src *source, c *client) {
	// The step's size is known up front (requests, or rate × duration), so
	// the schedule hits the asked rate exactly; see NewPacerN.
	n := st.Requests
	if byTime := int(math.Ceil(st.Rate * st.Duration.Seconds())); st.Duration > 0 && (n == 0 || byTime < n) {
		n = byTime
	}
	pacer, err := NewPacerN(st.Arrival, st.Rate, st.Burstiness, st.Seed, n+st.Warmup)
	if err != nil {
		r.failBuild(&st, 0, r.since(), err)
		return
	}
	var sem chan struct{}
	if st.MaxInFlight > 0 {
		sem = make(chan struct{}, st.MaxInFlight)
	}
	var wg sync.WaitGroup
	// The pacer waits on a timerfd-backed waker: sub-millisecond on time
	// whether the process is idle or busy, and without holding a scheduler
	// thread the request goroutines need (see internal/wake).
	wk := wake.New()
	defer wk.Close()
	wt := wake.NewWaiter()
	start := r.since() + int64(2*time.Millisecond) // time to build the first request
	for i := range n + st.Warmup {
		off := pacer.Next()
		intended := start + int64(off)
		rq, err := src.Next()
		if err != nil {
			r.failBuild(&st, i, intended, err)
			continue
		}
		if !wk.Wait(ctx, wt, r.t0.Add(time.Duration(intended))) {
			break
		}
		rec := r.newRecord(&st, rq, intended)
		r.sent.Add(1)
		r.inflight.Add(1)
		wg.Go(func() {
			defer r.inflight.Add(-1)
			if sem != nil {
				select {
				case sem <- struct{}{}:
				default:
					select {
					case sem <- struct{}{}:
					case <-ctx.Done():
						rec.DoneNS = r.since()
						rec.CapWaitNS = rec.DoneNS - rec.IntendedNS
						rec.ErrorClass, rec.Error = results.ErrCancelled, "run interrupted while waiting for max_in_flight"
						r.finish(rec)
						return
					}
					rec.CapWaitNS = r.since() - rec.IntendedNS
				}
				defer func() { <-sem }()
			}
			c.do(hard, rq, rec)
			r.finish(rec)
		})
	}
	wg.Wait()
}

// progressLoop reports progress every o.every until the returned stop is called.
func (r *runner) progressLoop(o runOptions, steps int) (stop func()) {
	if o.progress == nil || o.every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				label, _ := r.label.Load().(string)
				o.progress(Progress{
					Step: int(r.step.Load()), Steps: steps, Label: label, Sent: r.sent.Load(), Done: r.done.Load(),
					Errors: r.errs.Load(), InFlight: r.inflight.Load(), Elapsed: time.Duration(r.since() - r.stepStart.Load()),
					StepTotal: r.planned.Load(),
				})
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
