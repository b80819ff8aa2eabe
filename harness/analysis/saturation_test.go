package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

// synthStep is one ladder step: its load, TTFT P99 and ITL P50 (ms), and
// its figures' means (P95 and max equal to the mean).
type synthStep struct {
	load, ttftP99, itlP50 float64
	figs                  map[string]float64
	clientBound           bool
}

func synthLadder(steps []synthStep) []LadderStep {
	out := make([]LadderStep, len(steps))
	for i, s := range steps {
		sum := &results.StepSummary{Concurrency: int(s.load), ClientBound: s.clientBound,
			ClientBoundReason: "schedule lag p99 5 ms > 1 ms: the client sent late"}
		sum.TTFT = results.Stats{Count: 100, P99: s.ttftP99, Mean: s.ttftP99 / 2}
		sum.ITL = results.Stats{Count: 1000, P50: s.itlP50}
		r := &StepResources{}
		for name, v := range s.figs {
			r.Figures = append(r.Figures, Figure{Name: name, Source: "s", Samples: 10, Mean: ptr(v), P95: ptr(v),
				Max: ptr(v)})
		}
		out[i] = LadderStep{Load: s.load, Summary: sum, Resources: r}
	}
	return out
}

func TestSaturate(t *testing.T) {
	t.Parallel()
	fig := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = float64(kv[i+1].(int))
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		steps []synthStep
		knee  float64
		want  []string
		text  string
	}{
		{
			// Slots at their observed limit with a queue, KV well below full.
			"batch slots", []synthStep{
				{8, 20, 8, fig(FigRunning, 8, FigWaiting, 0, FigKVCache, 10, FigGPUUtil, 95), false},
				{32, 22, 8, fig(FigRunning, 32, FigWaiting, 0, FigKVCache, 30, FigGPUUtil, 97), false},
				{48, 80, 8, fig(FigRunning, 32, FigWaiting, 14, FigKVCache, 41, FigGPUUtil, 97), false},
				{64, 160, 8, fig(FigRunning, 32, FigWaiting, 30, FigKVCache, 41, FigGPUUtil, 97), false},
			}, 48, []string{BoundBatchSlots},
			"P99 TTFT knee at concurrency 48: batch slots full (running 32/32, waiting 14)",
		},
		{
			// The cache fills and preempts before the slots fill.
			"kv cache", []synthStep{
				{4, 20, 8, fig(FigRunning, 4, FigWaiting, 0, FigKVCache, 40, FigPreemptions, 0), false},
				{8, 22, 8, fig(FigRunning, 8, FigWaiting, 0, FigKVCache, 80, FigPreemptions, 0), false},
				{16, 90, 9, fig(FigRunning, 10, FigWaiting, 6, FigKVCache, 99, FigPreemptions, 12), false},
				{24, 200, 9, fig(FigRunning, 11, FigWaiting, 13, FigKVCache, 100, FigPreemptions, 30), false},
			}, 16, []string{BoundKVCache}, "KV cache full (KV cache 99 %, waiting 6, 12 preemptions)",
		},
		{
			// SMs busy while ITL grows with the batch.
			"compute", []synthStep{
				{1, 5, 3, fig(FigRunning, 1, FigWaiting, 0, FigSMActive, 40), false},
				{4, 8, 6, fig(FigRunning, 4, FigWaiting, 0, FigSMActive, 70), false},
				{8, 20, 10, fig(FigRunning, 8, FigWaiting, 0, FigSMActive, 85), false},
				{16, 40, 18, fig(FigRunning, 16, FigWaiting, 0, FigSMActive, 92), false},
			}, 8, []string{BoundCompute}, "compute-bound (SM active 85 %",
		},
		{
			// Clocks fall under power/thermal events.
			"power", []synthStep{
				{1, 5, 3, fig(FigSMClock, 1980, FigThrottled, 0), false},
				{8, 6, 3, fig(FigSMClock, 1980, FigThrottled, 0), false},
				{16, 30, 4, fig(FigSMClock, 1500, FigThrottled, 80), false},
				{32, 60, 4, fig(FigSMClock, 1400, FigThrottled, 100), false},
			}, 16, []string{BoundPowerThermal}, "SM clock 1500 of 1980 MHz",
		},
		{
			// Slots first (at 48), the cache from 64: both, slots first.
			"two", []synthStep{
				{8, 20, 8, fig(FigRunning, 8, FigWaiting, 0, FigKVCache, 10), false},
				{48, 80, 8, fig(FigRunning, 32, FigWaiting, 14, FigKVCache, 60), false},
				{64, 160, 8, fig(FigRunning, 32, FigWaiting, 30, FigKVCache, 95, FigPreemptions, 2), false},
			}, 48, []string{BoundBatchSlots, BoundKVCache}, "then KV cache full",
		},
		{
			// Nothing sampled qualifies.
			"none", []synthStep{
				{1, 5, 3, fig(FigGPUUtil, 20), false},
				{8, 6, 3, fig(FigGPUUtil, 30), false},
				{16, 30, 3, fig(FigGPUUtil, 30), false},
			}, 16, []string{BoundNoneObserved}, "",
		},
		{
			// A client-bound step is named after any server resource.
			"client", []synthStep{
				{8, 20, 8, fig(FigRunning, 8, FigWaiting, 0), true},
				{48, 80, 8, fig(FigRunning, 32, FigWaiting, 14), true},
			}, 48, []string{BoundBatchSlots, BoundClient}, "client-bound too (schedule lag p99 5 ms > 1 ms)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := Knee{Ladder: LadderConcurrency, LatencyKnee: ptr(tc.knee), LatencyMetric: "ttft_p99"}
			Saturate(&k, synthLadder(tc.steps), SaturationOptions{})
			if !slices.Equal(k.BoundBy, tc.want) {
				t.Errorf("bound_by %v, want %v; evidence %+v", k.BoundBy, tc.want, k.Evidence)
			}
			if !strings.Contains(k.Verdict, tc.text) {
				t.Errorf("verdict %q lacks %q", k.Verdict, tc.text)
			}
			for _, e := range k.Evidence {
				if e.Resource != BoundNoneObserved && e.Resource != BoundClient && e.RankCorrelation == nil &&
					len(tc.steps) >= 3 {
					t.Errorf("%s: no rank correlation over %d steps", e.Resource, len(tc.steps))
				}
			}
		})
	}
}
