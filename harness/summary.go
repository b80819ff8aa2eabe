package harness

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/llm-testbed/testbed/harness/results"
)

// Sample-size rules for percentile warnings: a percentile is trusted when
// at least 5 samples lie beyond it.
const (
	minSamplesP99  = 500
	minSamplesP999 = 5000
)

// metric accumulates one metric: exact moments plus an HDR histogram.
type metric struct {
	h        *hdrhistogram.Histogram
	n        int64
	mean, m2 float64 // Welford, in ns
	min, max int64
	clamped  int64
}

// maxTrackableUS is one hour: longer values are clamped and counted.
const maxTrackableUS = 3_600_000_000

func (m *metric) add(ns int64, count int64) {
	if count <= 0 {
		return
	}
	if m.h == nil {
		m.h = hdrhistogram.New(1, maxTrackableUS, 4)
		m.min, m.max = math.MaxInt64, math.MinInt64
	}
	if ns < 0 {
		ns = 0
	}
	us := (ns + 500) / 1000
	if us > maxTrackableUS {
		us = maxTrackableUS
		m.clamped += count
	}
	_ = m.h.RecordValues(us, count) // cannot fail: us is within range
	for range count {
		m.n++
		d := float64(ns) - m.mean
		m.mean += d / float64(m.n)
		m.m2 += d * (float64(ns) - m.mean)
	}
	m.min, m.max = min(m.min, ns), max(m.max, ns)
}

func (m *metric) stats() results.Stats {
	if m.n == 0 {
		return results.Stats{}
	}
	q := func(p float64) float64 { return float64(m.h.ValueAtQuantile(p)) / 1e3 }
	sd := 0.0
	if m.n > 1 {
		sd = math.Sqrt(m.m2/float64(m.n-1)) / 1e6
	}
	return results.Stats{
		Count: m.n, Mean: m.mean / 1e6, Stddev: sd, Min: float64(m.min) / 1e6, Max: float64(m.max) / 1e6,
		P50: q(50), P90: q(90), P95: q(95), P99: q(99), P999: q(99.9),
	}
}

// SummaryOption configures Summarize.
type SummaryOption func(*summarizer)

type summarizer struct{ slo SLO }

// WithSLO sets the thresholds for goodput (without it every successful
// request counts as good).
func WithSLO(s SLO) SummaryOption { return func(z *summarizer) { z.slo = s } }

// Summarize aggregates records into per-step summaries. It needs nothing
// but the records, so `testbed report` rebuilds a run's numbers from
// requests.jsonl alone.
func Summarize(records []results.Record, opts ...SummaryOption) results.Summary {
	var z summarizer
	for _, o := range opts {
		o(&z)
	}
	byStep := map[int][]int{}
	for i := range records {
		byStep[records[i].Step] = append(byStep[records[i].Step], i)
	}
	steps := make([]int, 0, len(byStep))
	for s := range byStep {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	out := results.Summary{Steps: make([]results.StepSummary, 0, len(steps))}
	for _, s := range steps {
		a := newStepAgg(z.slo)
		for _, i := range byStep[s] {
			a.add(&records[i])
		}
		out.Steps = append(out.Steps, a.summary())
	}
	return out
}

// stepAgg aggregates one step's records as they arrive, so a run never
// holds its records in memory.
type stepAgg struct {
	slo                                       SLO
	s                                         results.StepSummary
	seen                                      bool
	ttft, ttftSched, itl, chunkITL, tpot, e2e metric
	e2eSched, lag, capWait, ttfb              metric
	lagAll                                    metric // warm-up included, for StepMonitor
	wTTFT, wE2E                               metric
	warm                                      results.WarmupSummary
	good                                      int
	start, end                                int64
	measured                                  bool // start is set
	clamped                                   int64
}

func newStepAgg(slo SLO) *stepAgg {
	return &stepAgg{slo: slo, s: results.StepSummary{Errors: map[results.ErrorClass]int{}}, warm: results.WarmupSummary{Errors: map[results.ErrorClass]int{}}}
}

func (a *stepAgg) add(r *results.Record) {
	if !a.seen {
		a.seen = true
		a.s.Step, a.s.Target, a.s.Scenario, a.s.Concurrency, a.s.Rate = r.Step, r.Target, r.Scenario, r.Concurrency, r.Rate
		a.s.API, a.s.Stream = r.API, r.Stream
	}
	if r.SentNS > 0 {
		a.lagAll.add(r.SentNS-r.IntendedNS, 1)
	}
	if r.Warmup {
		a.warm.Requests++
		if !r.OK() {
			a.warm.Errors[r.ErrorClass]++
			return
		}
		a.warm.OK++
		if r.FirstTokenNS > 0 {
			a.wTTFT.add(r.FirstTokenNS-r.SentNS, 1)
		}
		a.wE2E.add(r.LastTokenNS-r.SentNS, 1)
		return
	}
	a.s.Requests++
	if !a.measured || r.IntendedNS < a.start {
		a.start = r.IntendedNS
	}
	a.measured = true
	a.end = max(a.end, r.DoneNS)
	if r.CapWaitNS > 0 {
		a.capWait.add(r.CapWaitNS, 1)
	}
	if !r.OK() {
		a.s.Errors[r.ErrorClass]++
		return
	}
	a.s.OK++
	if r.SentNS > 0 {
		a.lag.add(r.SentNS-r.IntendedNS, 1)
	}
	if r.FirstByteNS > 0 {
		a.ttfb.add(r.FirstByteNS-r.SentNS, 1)
	}
	a.s.InputTokens += int64(r.NIn)
	a.s.OutputTokens += int64(r.NOut)
	if r.NOutDiff != 0 {
		a.s.UsageDiscrepancies++
	}
	var ttft, tpot int64 = -1, -1
	if r.FirstTokenNS > 0 {
		ttft = r.FirstTokenNS - r.SentNS
		a.ttft.add(ttft, 1)
		a.ttftSched.add(r.FirstTokenNS-r.IntendedNS, 1)
		if r.NOut > 1 {
			tpot = (r.LastTokenNS - r.FirstTokenNS) / int64(r.NOut-1)
			a.tpot.add(tpot, 1)
		}
		for i, g := range r.ChunkGapsNS {
			a.chunkITL.add(g, 1)
			k := int64(1)
			if r.ChunkTokens != nil && i+1 < len(r.ChunkTokens) {
				k = max(1, int64(r.ChunkTokens[i+1]))
			}
			a.itl.add(g/k, k)
		}
	}
	e2e := r.LastTokenNS - r.SentNS
	if r.LastTokenNS == 0 {
		e2e = r.DoneNS - r.SentNS
	}
	a.e2e.add(e2e, 1)
	a.e2eSched.add(e2e+r.SentNS-r.IntendedNS, 1)
	if meets(a.slo.TTFT, ttft) && meets(a.slo.TPOT, tpot) && meets(a.slo.E2E, e2e) {
		a.good++
	}
}

// meets reports whether v (ns; -1 when undefined) is within limit (0 = none).
// An undefined metric, e.g. TPOT of a one-token answer, cannot break its SLO.
func meets(limit Duration, v int64) bool { return limit == 0 || v < 0 || v <= int64(limit) }

func (a *stepAgg) summary() results.StepSummary {
	s := a.s
	s.TTFT, s.TTFTFromSchedule, s.ITL, s.ChunkITL = a.ttft.stats(), a.ttftSched.stats(), a.itl.stats(), a.chunkITL.stats()
	s.TPOT, s.E2E, s.E2EFromSchedule, s.ScheduleLag = a.tpot.stats(), a.e2e.stats(), a.e2eSched.stats(), a.lag.stats()
	s.CapWait, s.TimeToFirstByte = a.capWait.stats(), a.ttfb.stats()
	s.Warmup = a.warm.Requests
	if a.warm.Requests > 0 {
		w := a.warm
		w.TTFT, w.E2E = a.wTTFT.stats(), a.wE2E.stats()
		s.WarmupSummary = &w
	}
	if a.end > a.start {
		s.WindowS = float64(a.end-a.start) / 1e9
		s.OutputTokensPerS = float64(s.OutputTokens) / s.WindowS
		s.InputTokensPerS = float64(s.InputTokens) / s.WindowS
		s.RequestsPerS = float64(s.OK) / s.WindowS
		s.GoodputRequestsPerS = float64(a.good) / s.WindowS
	}
	s.Warnings = a.warnings(s)
	return s
}

func (a *stepAgg) warnings(s results.StepSummary) []string {
	w := []string{}
	n := s.E2E.Count
	if s.Stream {
		n = s.TTFT.Count
	}
	switch {
	case n == 0 && s.Requests > 0:
		w = append(w, "no successful request: no latency figures")
	case n > 0 && n < minSamplesP99:
		w = append(w, fmt.Sprintf("only %d samples: P99 needs at least %d, P99.9 at least %d", n, minSamplesP99, minSamplesP999))
	case n > 0 && n < minSamplesP999:
		w = append(w, fmt.Sprintf("only %d samples: P99.9 needs at least %d", n, minSamplesP999))
	}
	if failed := s.Requests - s.OK; failed > 0 {
		classes := make([]results.ErrorClass, 0, len(s.Errors))
		for c := range s.Errors {
			classes = append(classes, c)
		}
		slices.Sort(classes)
		w = append(w, fmt.Sprintf("%d of %d requests failed %v; latencies cover successful requests only", failed, s.Requests, classes))
	}
	if s.ScheduleLag.Count > 0 && s.ScheduleLag.P99 > 1 {
		w = append(w, fmt.Sprintf("schedule lag p99 %.2f ms > 1 ms: the client sent late; see ttft_from_schedule_ms", s.ScheduleLag.P99))
	}
	if s.CapWait.Count > 0 {
		w = append(w, fmt.Sprintf("%d requests waited for max_in_flight (p99 %.1f ms); counted in latency from schedule", s.CapWait.Count, s.CapWait.P99))
	}
	if s.UsageDiscrepancies > 0 {
		w = append(w, fmt.Sprintf("%d requests: server-reported output tokens differ from the tokens counted in the stream", s.UsageDiscrepancies))
	}
	var clamped int64
	for _, m := range []*metric{&a.ttft, &a.ttftSched, &a.itl, &a.chunkITL, &a.tpot, &a.e2e, &a.e2eSched, &a.lag, &a.capWait, &a.ttfb} {
		clamped += m.clamped
	}
	if clamped > 0 {
		w = append(w, fmt.Sprintf("%d samples over one hour were clamped to one hour in the percentiles", clamped))
	}
	return w
}
