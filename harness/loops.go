package harness

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/wake"
)

// newRecord prepares the record of request rq in step st.
func (r *runner) newRecord(st *Step, rq *Request, intended int64) *results.Record {
	rec := getRecord(rq.OutputTokens)
	rec.ID = r.recordID(st, rq.Index)
	rec.Target = st.Target.Name
	rec.Step = st.Index
	rec.Scenario = st.Scenario
	rec.Concurrency = st.Concurrency
	rec.Rate = st.Rate
	rec.API = st.Target.API
	rec.Stream = st.Stream
	rec.Warmup = rq.Index < st.Warmup
	rec.IntendedNS = intended
	rec.NInPlanned = rq.InputTokens
	rec.MaxTokens = rq.OutputTokens
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
	rec := r.newRecord(st, &Request{Index: idx}, intended)
	rec.DoneNS = r.since()
	rec.ErrorClass = results.ErrOther
	rec.Error = err.Error()
	r.finish(rec)
}

// recordID is unique across the shards of a run: the run id (which names
// the shard), the step and the request's index in the whole step.
func (r *runner) recordID(st *Step, idx int) string {
	return fmt.Sprintf("%s-%d-%d", r.runID, st.Index, idx)
}

func (r *runner) runStep(ctx, hard context.Context, st Step) {
	src := newSource(st, r.prompts, r.plan.IgnoreEOS)
	pt := partOf(&st, r.shardI, r.shardN)
	if r.shardN > 1 {
		src.owns = pt.owns
	}
	c := r.clients[st.Target.Name+"|"+st.Connection]
	if st.Rate > 0 {
		r.openLoop(ctx, hard, st, src, c, pt)
	} else {
		r.closedLoop(ctx, hard, st, src, c, pt)
	}
}

// closedLoop runs Concurrency workers, each sending its next request as
// soon as its previous one finished. t_sched is the moment the worker was
// free with its next request built.
//
// A shard runs its share of the workers; its k-th request takes the k-th
// global index it owns, so warm-up and ids mean what they do in one process.
func (r *runner) closedLoop(ctx, hard context.Context, st Step, src *source, c *client, pt part) {
	total := int64(-1)
	if st.Requests > 0 {
		total = int64(pt.count(st.Requests + st.Warmup))
	}
	var next atomic.Int64
	var measureEnd atomic.Int64 // ns since t0 when the duration ends; 0 until the first measured request
	var wg sync.WaitGroup
	for range pt.workers() {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if total >= 0 && k >= total {
					return
				}
				i := int64(pt.global(int(k)))
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
//
// A shard draws the whole step's schedule and sends only the arrivals it
// owns, so the shards together keep the single process's arrival times.
func (r *runner) openLoop(ctx, hard context.Context, st Step, src *source, c *client, pt part) {
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
		sem = make(chan struct{}, share(st.MaxInFlight, r.shardI, r.shardN))
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
		if !pt.owns(i) {
			continue
		}
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
