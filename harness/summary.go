package harness

import (
	"fmt"
	"slices"
	"sort"

	"github.com/llm-testbed/testbed/harness/results"
)

// Sample-size rules for percentile warnings: a percentile is trusted when
// at least 5 samples lie beyond it.
const (
	minSamplesP99  = 500
	minSamplesP999 = 5000
)

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
	ttft, ttftSched, itl, chunkITL, tpot, e2e results.Metric
	e2eSched, lag, capWait, ttfb              results.Metric
	delay, coalesced                          results.Metric // client delay per chunk, coalescing bound per request
	lagAll, delayAll                          results.Metric // warm-up included, for StepMonitor
	timed                                     int            // requests with a first token
	retryWait                                 results.Metric // requests retried after a 429
	wTTFT, wE2E                               results.Metric
	warm                                      results.WarmupSummary
	good                                      int
	start, end                                int64
	measured                                  bool // start is set
	clamped                                   int64
}

func newStepAgg(slo SLO) *stepAgg {
	return &stepAgg{
		slo:  slo,
		s:    results.StepSummary{Errors: map[results.ErrorClass]int{}},
		warm: results.WarmupSummary{Errors: map[results.ErrorClass]int{}},
	}
}

func (a *stepAgg) add(r *results.Record) {
	if !a.seen {
		a.seen = true
		a.s.Step = r.Step
		a.s.Target = r.Target
		a.s.Scenario = r.Scenario
		a.s.Concurrency = r.Concurrency
		a.s.Rate = r.Rate
		a.s.API, a.s.Stream = r.API, r.Stream
	}
	if r.SentNS > 0 {
		a.lagAll.Add(r.ScheduleLagNS(), 1)
	}
	if r.KernelStamped() {
		for _, d := range r.ChunkDelaysNS {
			a.delayAll.Add(d, 1)
		}
	}
	if r.Warmup {
		a.warm.Requests++
		if !r.OK() {
			a.warm.Errors[r.ErrorClass]++
			return
		}
		a.warm.OK++
		if r.FirstTokenNS > 0 {
			a.wTTFT.Add(r.FirstToken()-r.SentNS, 1)
		}
		a.wE2E.Add(r.LastToken()-r.SentNS, 1)
		return
	}
	a.s.Requests++
	if !a.measured || r.IntendedNS < a.start {
		a.start = r.IntendedNS
	}
	a.measured = true
	a.end = max(a.end, r.DoneNS)
	if r.CapWaitNS > 0 {
		a.capWait.Add(r.CapWaitNS, 1)
	}
	if r.RetryWaitNS > 0 {
		a.retryWait.Add(r.RetryWaitNS, 1)
	}
	if !r.OK() {
		a.s.Errors[r.ErrorClass]++
		return
	}
	a.s.OK++
	if r.SentNS > 0 {
		a.lag.Add(r.ScheduleLagNS(), 1)
	}
	if r.FirstByteNS > 0 {
		a.ttfb.Add(r.FirstByteNS-r.SentNS, 1)
	}
	a.s.InputTokens += int64(r.NIn)
	a.s.OutputTokens += int64(r.NOut)
	if r.NOutDiff != 0 {
		a.s.UsageDiscrepancies++
	}
	var ttft, tpot int64 = -1, -1
	first, last := r.FirstToken(), r.LastToken()
	if r.FirstTokenNS > 0 {
		a.addStamps(r)
		ttft = first - r.SentNS
		a.ttft.Add(ttft, 1)
		a.ttftSched.Add(first-r.IntendedNS, 1)
		if r.NOut > 1 {
			tpot = (last - first) / int64(r.NOut-1)
			a.tpot.Add(tpot, 1)
		}
		for i := range r.ChunkGapsNS {
			g := r.KernelGap(i)
			a.chunkITL.Add(g, 1)
			k := int64(1)
			if r.ChunkTokens != nil && i+1 < len(r.ChunkTokens) {
				k = max(1, int64(r.ChunkTokens[i+1]))
			}
			a.itl.Add(g/k, k)
		}
	}
	e2e := last - r.SentNS
	if r.LastTokenNS == 0 {
		e2e = r.DoneNS - r.SentNS
	}
	a.e2e.Add(e2e, 1)
	a.e2eSched.Add(e2e+r.SentNS-r.IntendedNS, 1)
	if meets(a.slo.TTFT, ttft) && meets(a.slo.TPOT, tpot) && meets(a.slo.E2E, e2e) {
		a.good++
	}
}

// addStamps counts how a timed request was stamped, and its client delays.
func (a *stepAgg) addStamps(r *results.Record) {
	a.timed++
	a.s.TokenChunks += int64(len(r.ChunkGapsNS) + 1)
	if !r.KernelStamped() {
		return
	}
	a.s.KernelStamped++
	for _, d := range r.ChunkDelaysNS {
		a.delay.Add(d, 1)
	}
	if r.ChunksCoalesced > 0 {
		a.s.ChunksCoalesced += int64(r.ChunksCoalesced)
		a.coalesced.Add(r.CoalescedBoundNS, 1)
	}
}

// clock names the stamps a step's token times came from.
func (a *stepAgg) clock() string {
	switch {
	case a.timed == 0:
		return ""
	case a.s.KernelStamped == a.timed:
		return "kernel"
	case a.s.KernelStamped == 0:
		return "user"
	default:
		return "mixed"
	}
}

// meets reports whether v (ns; -1 when undefined) is within limit (0 = none).
// An undefined metric, e.g. TPOT of a one-token answer, cannot break its SLO.
func meets(limit Duration, v int64) bool { return limit == 0 || v < 0 || v <= int64(limit) }

func (a *stepAgg) summary() results.StepSummary {
	s := a.s
	s.TTFT = a.ttft.Stats()
	s.TTFTFromSchedule = a.ttftSched.Stats()
	s.ITL = a.itl.Stats()
	s.ChunkITL = a.chunkITL.Stats()
	s.TPOT = a.tpot.Stats()
	s.E2E = a.e2e.Stats()
	s.E2EFromSchedule = a.e2eSched.Stats()
	s.ScheduleLag = a.lag.Stats()
	s.CapWait, s.TimeToFirstByte = a.capWait.Stats(), a.ttfb.Stats()
	s.Clock = a.clock()
	s.ClientDelay = a.delay.Stats()
	s.CoalescedBound = a.coalesced.Stats()
	s.RetryWait = a.retryWait.Stats()
	s.Warmup = a.warm.Requests
	if a.warm.Requests > 0 {
		w := a.warm
		w.TTFT, w.E2E = a.wTTFT.Stats(), a.wE2E.Stats()
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
		w = append(
			w,
			fmt.Sprintf("only %d samples: P99 needs at least %d, P99.9 at least %d", n, minSamplesP99, minSamplesP999),
		)
	case n > 0 && n < minSamplesP999:
		w = append(w, fmt.Sprintf("only %d samples: P99.9 needs at least %d", n, minSamplesP999))
	}
	if failed := s.Requests - s.OK; failed > 0 {
		classes := make([]results.ErrorClass, 0, len(s.Errors))
		for c := range s.Errors {
			classes = append(classes, c)
		}
		slices.Sort(classes)
		w = append(
			w,
			fmt.Sprintf(
				"%d of %d requests failed %v; latencies cover successful requests only",
				failed,
				s.Requests,
				classes,
			),
		)
	}
	if s.ScheduleLag.Count > 0 && s.ScheduleLag.P99 > 1 {
		w = append(
			w,
			fmt.Sprintf(
				"schedule lag p99 %.2f ms > 1 ms: the client sent late; see ttft_from_schedule_ms",
				s.ScheduleLag.P99,
			),
		)
	}
	if s.CapWait.Count > 0 {
		w = append(
			w,
			fmt.Sprintf(
				"%d requests waited for max_in_flight (p99 %.1f ms); counted in latency from schedule",
				s.CapWait.Count,
				s.CapWait.P99,
			),
		)
	}
	if s.RetryWait.Count > 0 {
		w = append(
			w,
			fmt.Sprintf(
				"%d requests were retried after a 429 (wait p99 %.1f ms); counted in latency from schedule, "+
					"not in schedule lag",
				s.RetryWait.Count,
				s.RetryWait.P99,
			),
		)
	}
	if s.UsageDiscrepancies > 0 {
		w = append(
			w,
			fmt.Sprintf(
				"%d requests: server-reported output tokens differ from the tokens counted in the stream",
				s.UsageDiscrepancies,
			),
		)
	}
	if s.ChunksCoalesced > 0 {
		w = append(w, fmt.Sprintf("%d of %d token chunks shared a read with a later event (the client read late): "+
			"their kernel stamps are late by at most %.3f ms (p99 of the per-request bound %.3f ms)",
			s.ChunksCoalesced, s.TokenChunks, s.CoalescedBound.Max, s.CoalescedBound.P99))
	}
	if s.Clock == "mixed" {
		w = append(w, fmt.Sprintf("%d of %d timed requests had kernel receive stamps; the rest are timed in user space",
			s.KernelStamped, a.timed))
	}
	var clamped int64
	for _, m := range a.metrics() {
		clamped += m.Clamped()
	}
	if clamped > 0 {
		w = append(w, fmt.Sprintf("%d samples over one hour were clamped to one hour in the percentiles", clamped))
	}
	return w
}

// metrics names the step's latency metrics as summary.json does.
func (a *stepAgg) metrics() map[string]*results.Metric {
	return map[string]*results.Metric{
		"ttft_ms":               &a.ttft,
		"ttft_from_schedule_ms": &a.ttftSched,
		"itl_ms":                &a.itl,
		"chunk_itl_ms":          &a.chunkITL,
		"tpot_ms":               &a.tpot,
		"e2e_ms":                &a.e2e,
		"e2e_from_schedule_ms":  &a.e2eSched,
		"schedule_lag_ms":       &a.lag,
		"in_flight_cap_wait_ms": &a.capWait,
		"ttfb_ms":               &a.ttfb,
		"client_delay_ms":       &a.delay,
	}
}

// histograms is the step's histograms.jsonl line.
func (a *stepAgg) histograms() results.StepHistograms {
	return results.StepHistograms{
		Step:          a.s.Step,
		Target:        a.s.Target,
		Scenario:      a.s.Scenario,
		Concurrency:   a.s.Concurrency,
		Rate:          a.s.Rate,
		WindowStartNS: a.start,
		WindowEndNS:   a.end,
		Metrics:       a.metrics(),
		Warmup:        a.warmupMetrics(),
	}
}

// warmupMetrics names the warm-up metrics as warmup_summary does.
func (a *stepAgg) warmupMetrics() map[string]*results.Metric {
	return map[string]*results.Metric{"ttft_ms": &a.wTTFT, "e2e_ms": &a.wE2E}
}
