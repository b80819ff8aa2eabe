package analysis

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// Analysis is the content of DIR/analysis.json.
type Analysis struct {
	Knees       []Knee         `json:"knees"`
	Anomalies   []Anomaly      `json:"anomalies"`
	LongContext []ContextCurve `json:"long_context"`
	ColdStart   []ColdWarm     `json:"cold_start"`
	Steps       []StepFacts    `json:"steps"`
	Options     Options        `json:"options"`
}

// StepFacts are the per-step conclusions: failure rates, SLO attainment and
// how far each reported percentile can be trusted.
type StepFacts struct {
	Step            int     `json:"step"`
	Target          string  `json:"target"`
	Scenario        string  `json:"scenario"`
	Label           string  `json:"label"`
	Load            float64 `json:"load"`         // concurrency or rate
	InputTokens     int     `json:"input_tokens"` // median N_in of the measured requests
	OutputTokens    int     `json:"output_tokens"`
	Requests        int     `json:"requests"`
	ErrorRate       float64 `json:"error_rate"`
	TimeoutRate     float64 `json:"timeout_rate"`
	RateLimitedRate float64 `json:"rate_limited_rate"`
	// SLOAttainment is the share of measured requests that succeeded and met
	// every SLO; MeetsSLO compares it with Options.SLOAttainment.
	SLOAttainment float64     `json:"slo_attainment"`
	MeetsSLO      bool        `json:"meets_slo"`
	Percentiles   []MetricCIs `json:"percentiles"`
	// Resources is the GPU and server state over the step's measured
	// window; absent when the run sampled neither.
	Resources *StepResources `json:"resources,omitempty"`
	// Decomposition is where the step's time went: network, server, decode
	// (decomposition.go); set by AddDecomposition.
	Decomposition *Decomposition `json:"decomposition,omitempty"`
}

// MetricCIs holds the confidence intervals of one metric's percentiles.
type MetricCIs struct {
	Metric    string     `json:"metric"` // "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"
	Intervals []Interval `json:"intervals"`
}

// Options configures Analyze; the zero value uses every default.
type Options struct {
	Knee       KneeOptions    `json:"knee"`
	Anomaly    AnomalyOptions `json:"anomaly"`
	SLO        harness.SLO    `json:"slo"`
	BendExcess float64        `json:"bend_excess"`
	Confidence float64        `json:"confidence"`
	// SLOAttainment is the share of requests that must meet the SLO for a
	// step to count as meeting it. Default 0.99 (the P99 meets the SLO).
	SLOAttainment float64 `json:"slo_attainment"`
	// Saturation holds the binding-resource thresholds; MinResourceSamples
	// is how many readings a step's figure needs (default 3).
	Saturation         SaturationOptions `json:"saturation"`
	MinResourceSamples int               `json:"min_resource_samples"`
}

func (o Options) withDefaults() Options {
	o.Knee = o.Knee.withDefaults()
	o.Anomaly = o.Anomaly.withDefaults()
	if o.BendExcess <= 0 {
		o.BendExcess = DefaultBendExcess
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = DefaultConfidence
	}
	if o.SLOAttainment <= 0 || o.SLOAttainment > 1 {
		o.SLOAttainment = 0.99
	}
	o.Saturation = o.Saturation.withDefaults()
	if o.MinResourceSamples <= 0 {
		o.MinResourceSamples = DefaultMinResourceSamples
	}
	return o
}

// ReportedPercentiles are the percentiles given confidence intervals.
var ReportedPercentiles = []float64{50, 95, 99, 99.9}

// Samples are one step's measured (non-warm-up, successful) values in ms.
// The per-request metrics are kept whole, so their percentiles and
// intervals are exact order statistics. ITL has one value per token —
// hundreds of millions in a long run — so it goes into an HDR histogram
// (µs, 3 significant digits, as precise as summary.json's figures).
type Samples struct {
	TTFT, TPOT, E2E []float64
	ITL             *hdrhistogram.Histogram
	InputTokens     int // median N_in
	OutputTokens    int // median N_out
}

// itlMaxUS bounds the ITL histogram: one hour, in µs; longer gaps are
// clamped (a stream idle that long has timed out anyway).
const itlMaxUS = 3_600_000_000

// StepSamples collects each step's samples from the records, keyed by step
// index. Warm-up and failed requests are left out, as in the summaries.
func StepSamples(recs []results.Record) map[int]*Samples {
	out := map[int]*Samples{}
	nin, nout := map[int][]float64{}, map[int][]float64{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() {
			continue
		}
		s := out[r.Step]
		if s == nil {
			s = &Samples{ITL: hdrhistogram.New(1, itlMaxUS, 3)}
			out[r.Step] = s
		}
		if r.FirstTokenNS > 0 {
			s.TTFT = append(s.TTFT, ms(r.FirstTokenNS-r.SentNS))
		}
		if r.LastTokenNS > 0 {
			s.E2E = append(s.E2E, ms(r.LastTokenNS-r.SentNS))
		}
		if r.NOut > 1 && r.LastTokenNS > r.FirstTokenNS {
			s.TPOT = append(s.TPOT, ms(r.LastTokenNS-r.FirstTokenNS)/float64(r.NOut-1))
		}
		recordITL(s.ITL, r)
		nin[r.Step] = append(nin[r.Step], float64(r.NIn))
		nout[r.Step] = append(nout[r.Step], float64(r.NOut))
	}
	for k, s := range out {
		s.InputTokens = int(Percentile(sortedCopy(nin[k]), 50))
		s.OutputTokens = int(Percentile(sortedCopy(nout[k]), 50))
	}
	return out
}

// recordITL adds the token-weighted inter-token latencies of r: a chunk
// carrying k tokens contributes its gap divided evenly over k tokens.
func recordITL(h *hdrhistogram.Histogram, r *results.Record) {
	for i, g := range r.ChunkGapsNS {
		k := int64(1)
		if i+1 < len(r.ChunkTokens) && r.ChunkTokens[i+1] > 1 {
			k = int64(r.ChunkTokens[i+1])
		}
		us := min(max((g/k+500)/1000, 1), itlMaxUS)
		_ = h.RecordValues(us, k) // cannot fail: us is within the histogram's range
	}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// Analyze draws every conclusion from a run's summary steps and records.
func Analyze(steps []results.StepSummary, recs []results.Record, o Options) Analysis {
	return AnalyzeRun(steps, recs, nil, nil, o)
}

// AnalyzeRun is Analyze with the run's server and GPU samples: each step's
// resources over its measured window (windows; nil derives them from the
// records) and what bound each knee.
func AnalyzeRun(steps []results.StepSummary, recs []results.Record, sampled []results.Sample,
	windows map[int]Window, o Options) Analysis {
	o = o.withDefaults()
	if windows == nil {
		windows = WindowsFromRecords(recs)
	}
	var res map[int]*StepResources
	if len(sampled) > 0 {
		res = StepResourcesOf(sampled, windows, o.MinResourceSamples)
	}
	a := Analysis{
		Options:     o,
		Knees:       []Knee{},
		Anomalies:   []Anomaly{},
		LongContext: []ContextCurve{},
		ColdStart:   []ColdWarm{},
	}
	samples := StepSamples(recs)
	attain := sloAttainment(recs, o.SLO)

	facts := map[int]StepFacts{}
	for i := range steps {
		s := &steps[i]
		f := StepFacts{Step: s.Step, Target: s.Target, Scenario: s.Scenario, Label: s.Label(),
			Requests: s.Requests, ErrorRate: ErrorRate(s), Load: LoadOf(s)}
		if s.Requests > 0 {
			f.TimeoutRate = float64(s.Errors[results.ErrTimeout]) / float64(s.Requests)
			f.RateLimitedRate = float64(s.Errors[results.ErrRateLimited]) / float64(s.Requests)
		}
		f.SLOAttainment = attain[s.Step]
		f.Resources = res[s.Step]
		f.MeetsSLO = s.Requests > 0 && f.SLOAttainment >= o.SLOAttainment
		if sm := samples[s.Step]; sm != nil {
			f.InputTokens, f.OutputTokens = sm.InputTokens, sm.OutputTokens
			if s.Scenario == harness.ScenarioLongContext {
				f.Label += fmt.Sprintf(" %d tok", sm.InputTokens) // buckets differ by length, not load
			}
			for _, m := range []struct {
				name string
				v    []float64
				h    *hdrhistogram.Histogram
			}{{"ttft_ms", sm.TTFT, nil}, {"itl_ms", nil, sm.ITL}, {"tpot_ms", sm.TPOT, nil}, {"e2e_ms", sm.E2E, nil}} {
				if len(m.v) == 0 && (m.h == nil || m.h.TotalCount() == 0) {
					continue
				}
				mc := MetricCIs{Metric: m.name}
				sorted := sortedCopy(m.v)
				for _, p := range ReportedPercentiles {
					if m.h != nil {
						mc.Intervals = append(mc.Intervals, intervalHist(m.h, p, o.Confidence))
					} else {
						mc.Intervals = append(mc.Intervals, intervalSorted(sorted, p, o.Confidence))
					}
				}
				f.Percentiles = append(f.Percentiles, mc)
			}
		}
		facts[s.Step] = f
		a.Steps = append(a.Steps, f)
	}

	// Knees: one per (target, ladder).
	type lk struct{ target, ladder string }
	ladders := map[lk][]LadderPoint{}
	ladderSteps := map[lk][]LadderStep{}
	var order []lk
	for i := range steps {
		s := &steps[i]
		lad, load := LadderOf(s)
		if lad == "" {
			continue
		}
		k := lk{s.Target, lad}
		if _, ok := ladders[k]; !ok {
			order = append(order, k)
		}
		f := facts[s.Step]
		ladderSteps[k] = append(ladderSteps[k], LadderStep{Load: load, Summary: s, Resources: res[s.Step]})
		ladders[k] = append(ladders[k], LadderPoint{Load: load, Throughput: s.OutputTokensPerS,
			TTFTP99: s.TTFT.P99, E2EP99: s.E2E.P99, ErrorRate: f.ErrorRate, MeetsSLO: f.MeetsSLO})
	}
	for _, k := range order {
		kn := FindKnee(k.target, k.ladder, ladders[k], o.Knee)
		Saturate(&kn, ladderSteps[k], o.Saturation)
		a.Knees = append(a.Knees, kn)
	}

	// Long-context curves and cold starts, per target in first-seen order.
	ctx := map[string][]ContextPoint{}
	cold, warm := map[string][]float64{}, map[string][]float64{}
	var targets []string
	seen := map[string]bool{}
	for i := range steps {
		s := &steps[i]
		if !seen[s.Target] {
			seen[s.Target] = true
			targets = append(targets, s.Target)
		}
		sm := samples[s.Step]
		if sm == nil {
			continue
		}
		switch s.Scenario {
		case harness.ScenarioLongContext:
			if len(sm.TTFT) > 0 {
				ctx[s.Target] = append(ctx[s.Target], ContextPoint{Tokens: float64(sm.InputTokens),
					TTFTMS: Percentile(sortedCopy(sm.TTFT), 50), N: len(sm.TTFT)})
			}
		case harness.ScenarioColdStart:
			cold[s.Target] = append(cold[s.Target], sm.TTFT...)
		case harness.ScenarioWarm:
			warm[s.Target] = append(warm[s.Target], sm.TTFT...)
		}
	}
	for _, t := range targets {
		if len(ctx[t]) > 0 {
			a.LongContext = append(a.LongContext, BendOf(t, ctx[t], o.BendExcess))
		}
		if len(cold[t]) > 0 {
			a.ColdStart = append(a.ColdStart, CompareColdWarm(t, cold[t], warm[t]))
		}
	}

	// Streaming anomalies, per step.
	var ss []StreamSample
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.Stream {
			continue
		}
		f, ok := facts[r.Step]
		group := f.Label
		if !ok {
			group = fmt.Sprintf("step %d", r.Step)
		}
		ss = append(ss, StreamSample{Target: r.Target, Group: group, ErrorClass: r.ErrorClass,
			SentNS: r.SentNS, FirstByteNS: r.FirstByteNS, FirstTokenNS: r.FirstTokenNS,
			ChunkGapsNS: r.ChunkGapsNS, OutputTokens: r.NOut})
	}
	a.Anomalies = append(a.Anomalies, DetectAnomalies(ss, o.Anomaly)...)
	sort.SliceStable(a.Steps, func(i, j int) bool { return a.Steps[i].Step < a.Steps[j].Step })
	return a
}

// intervalSorted is PercentileCI for an already sorted sample.
func intervalSorted(s []float64, p, conf float64) Interval {
	iv := Interval{Percentile: p, Confidence: conf, N: len(s), MinSamples: MinSamples(p, conf)}
	if len(s) == 0 {
		return iv
	}
	iv.Value = Percentile(s, p)
	iv.LoRank, iv.HiRank, iv.Coverage, iv.Adequate = RankBounds(len(s), p, conf)
	iv.Lo, iv.Hi = s[iv.LoRank-1], s[iv.HiRank-1]
	return iv
}

// intervalHist is PercentileCI for a sample held in an HDR histogram (µs):
// the same ranks, read back at the histogram's precision.
func intervalHist(h *hdrhistogram.Histogram, p, conf float64) Interval {
	n := int(h.TotalCount())
	iv := Interval{Percentile: p, Confidence: conf, N: n, MinSamples: MinSamples(p, conf)}
	if n == 0 {
		return iv
	}
	at := func(rank int) float64 { return float64(h.ValueAtQuantile(100*float64(rank)/float64(n))) / 1e3 }
	iv.Value = at(min(max(int(math.Ceil(p/100*float64(n))), 1), n)) // nearest rank, as Percentile
	iv.LoRank, iv.HiRank, iv.Coverage, iv.Adequate = RankBounds(n, p, conf)
	iv.Lo, iv.Hi = at(iv.LoRank), at(iv.HiRank)
	return iv
}

// sloAttainment is, per step, the share of measured requests that
// succeeded and met every SLO set (TTFT, TPOT, E2E).
func sloAttainment(recs []results.Record, slo harness.SLO) map[int]float64 {
	n, good := map[int]int{}, map[int]int{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.ErrorClass == results.ErrCancelled {
			continue
		}
		n[r.Step]++
		if !r.OK() {
			continue
		}
		ok := true
		if slo.TTFT > 0 && (r.FirstTokenNS == 0 || time.Duration(r.FirstTokenNS-r.SentNS) > slo.TTFT.D()) {
			ok = false
		}
		if slo.E2E > 0 && time.Duration(r.LastTokenNS-r.SentNS) > slo.E2E.D() {
			ok = false
		}
		if slo.TPOT > 0 && r.NOut > 1 &&
			time.Duration(r.LastTokenNS-r.FirstTokenNS)/time.Duration(r.NOut-1) > slo.TPOT.D() {
			ok = false
		}
		if ok {
			good[r.Step]++
		}
	}
	out := map[int]float64{}
	for k, v := range n {
		out[k] = float64(good[k]) / float64(v)
	}
	return out
}

// Write stores a as DIR/analysis.json.
func Write(dir string, a Analysis) error {
	if err := results.WriteJSON(filepath.Join(dir, results.AnalysisFile), a); err != nil {
		return fmt.Errorf("analysis: %w", err)
	}
	return nil
}
