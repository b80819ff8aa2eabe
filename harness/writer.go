package harness

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

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

// lagQuery asks the writer for a step's schedule-lag and client-delay p99
// (warm-up included), for StepMonitor.StepEnded.
type lagQuery struct {
	index int
	reply chan lagReply
}

// lagReply answers a lagQuery; delay is -1 without kernel stamps.
type lagReply struct{ lag, delay time.Duration }

// writeLoop is the only writer of requests.jsonl and the only reader of
// finished records: it encodes each line, feeds the step's aggregate and
// recycles the record. The channel send blocks rather than drop a record.
//
// It also writes each step's histograms.jsonl line at the step's end.
func (r *runner) writeLoop(
	w *results.LineWriter[results.Record],
	hw *results.LineWriter[results.StepHistograms],
	slo SLO,
) error {
	var firstErr error
	var failed int64
	aggs := map[int]*stepAgg{}
	for m := range r.out {
		if m.lag != nil {
			rep := lagReply{delay: -1}
			if a := aggs[m.lag.index]; a != nil && a.lagAll.Count() > 0 {
				rep.lag = time.Duration(a.lagAll.Quantile(99) * 1e6)
			}
			if a := aggs[m.lag.index]; a != nil && a.delayAll.Count() > 0 {
				rep.delay = time.Duration(a.delayAll.Quantile(99) * 1e6)
			}
			m.lag.reply <- rep
			continue
		}
		if m.end != nil {
			a := aggs[m.end.index]
			delete(aggs, m.end.index)
			var s results.StepSummary
			if a != nil {
				s = a.summary()
				h := a.histograms()
				if err := hw.Write(&h); err != nil && firstErr == nil {
					firstErr = err
				}
			} else {
				st := r.plan.Steps()[m.end.index]
				s = newStepAgg(slo).summary()
				s.Step = st.Index
				s.Target = st.Target.Name
				s.Scenario = st.Scenario
				s.Concurrency = st.Concurrency
				s.Rate = st.Rate
				s.Warnings = append(s.Warnings, "no request ran in this step")
			}
			s.ClientBound, s.ClientBoundReason = m.end.bound, m.end.reason
			r.summaries = append(r.summaries, s)
			if err := errors.Join(w.Flush(), hw.Flush()); err != nil && firstErr == nil {
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
		if r.observe != nil {
			r.observe(rec)
		}
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
	delays := rec.ChunkDelaysNS[:0]
	if cap(delays) < maxTokens+1 {
		delays = make([]int64, 0, maxTokens+1)
	}
	*rec = results.Record{ChunkGapsNS: gaps, ChunkDelaysNS: delays}
	return rec
}

func putRecord(rec *results.Record) {
	if cap(rec.ChunkGapsNS) > 1<<16 || cap(rec.ChunkDelaysNS) > 1<<16 {
		return // let unusually large ones go
	}
	recordPool.Put(rec)
}
