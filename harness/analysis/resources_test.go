package analysis

import (
	"math"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

// scrape is a server_metrics.jsonl line at t ms from the mock-like server.
func scrape(tMS int64, m map[string]float64) results.Sample {
	return results.Sample{Offset: tMS * msNS, Source: "http://127.0.0.1:8000/metrics", Metrics: m}
}

// nvml is a gpu.jsonl line at t ms with one device.
func nvml(tMS int64, util, powerW float64, reasons uint64) results.Sample {
	used := uint64(40 << 30)
	return results.Sample{Offset: tMS * msNS, Source: "nvml", Devices: []results.Device{{
		Index: 0, UtilPercent: &util, PowerW: &powerW, MemUsedBytes: &used, ClockEventReasons: &reasons}}}
}

func figure(t *testing.T, r *StepResources, name string) Figure {
	t.Helper()
	for _, f := range r.Figures {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no %s among %+v", name, r.Figures)
	return Figure{}
}

func TestStepResourcesOf(t *testing.T) {
	t.Parallel()
	const gpu = `{gpu="0",UUID="GPU-x"}`
	samples := []results.Sample{
		// Before the window: the counters' baseline only.
		scrape(50, map[string]float64{"vllm:num_preemptions_total": 3, "vllm:num_requests_running": 99}),
		scrape(100, map[string]float64{"vllm:num_requests_running": 30, "vllm:num_requests_waiting": 0,
			"vllm:kv_cache_usage_perc": 0.5, "vllm:num_preemptions_total": 4, "DCGM_FI_DEV_FB_USED" + gpu: 40960,
			"DCGM_FI_DEV_FB_FREE" + gpu: 40960, "DCGM_FI_PROF_SM_ACTIVE" + gpu: 0.5}),
		scrape(200, map[string]float64{"vllm:num_requests_running": 32, "vllm:num_requests_waiting": 4,
			"vllm:kv_cache_usage_perc": 0.6, "vllm:num_preemptions_total": 7, "DCGM_FI_PROF_SM_ACTIVE" + gpu: 0.7}),
		scrape(300, map[string]float64{"vllm:num_requests_running": 32, "vllm:num_requests_waiting": 8,
			"vllm:kv_cache_usage_perc": 0.7, "vllm:num_preemptions_total": 9, "DCGM_FI_PROF_SM_ACTIVE" + gpu: 0.9}),
		// A failed scrape keeps its place but carries nothing.
		{Offset: 350 * msNS, Source: "http://127.0.0.1:8000/metrics", Error: "connection refused"},
		nvml(150, 90, 300, 0),
		nvml(250, 100, 650, 0x4),
		// After the window: ignored.
		scrape(500, map[string]float64{"vllm:num_requests_running": 0, "vllm:num_preemptions_total": 100}),
	}
	res := StepResourcesOf(samples, map[int]Window{1: {StartNS: 100 * msNS, EndNS: 400 * msNS}}, 3)
	r := res[1]
	if r == nil {
		t.Fatal("no resources for step 1")
	}
	for _, tc := range []struct {
		name           string
		mean, p95, max float64
		note           bool
	}{
		// Three readings: mean 31.33, the P95 and max 32.
		{FigRunning, 94.0 / 3, 32, 32, false},
		// Waiting 0, 4, 8.
		{FigWaiting, 4, 8, 8, false},
		// Scaled to percent.
		{FigKVCache, 60, 70, 70, false},
		// DCGM ratio scaled to percent, per GPU label.
		{FigSMActive, 70, 90, 90, false},
		// Counter: 9 at the end minus 3 before the window.
		{FigPreemptions, 6, math.NaN(), math.NaN(), false},
		// Two NVML readings: too few.
		{FigGPUUtil, 0, 0, 0, true},
	} {
		f := figure(t, r, tc.name)
		if tc.note {
			if f.Mean != nil || !strings.Contains(f.Note, "2 samples") {
				t.Errorf("%s: %+v, want a note instead of numbers", tc.name, f)
			}
			continue
		}
		if f.Mean == nil || math.Abs(*f.Mean-tc.mean) > 1e-9 {
			t.Errorf("%s mean = %v, want %v", tc.name, f.Mean, tc.mean)
		}
		if !math.IsNaN(tc.p95) && (f.P95 == nil || *f.P95 != tc.p95 || *f.Max != tc.max) {
			t.Errorf("%s p95/max = %v/%v, want %v/%v", tc.name, f.P95, f.Max, tc.p95, tc.max)
		}
	}
	if f := figure(t, r, FigSMActive); f.Source != "127.0.0.1:8000 GPU0" {
		t.Errorf("DCGM source %q, want host and gpu label", f.Source)
	}
	if f := figure(t, r, FigMemTotal); f.Samples != 1 {
		t.Errorf("total from FB_USED+FB_FREE: %+v", f)
	}
	res = StepResourcesOf(samples, map[int]Window{1: {StartNS: 100 * msNS, EndNS: 400 * msNS}}, 2)
	if f := figure(t, res[1], FigThrottled); f.Mean == nil || *f.Mean != 50 {
		t.Errorf("power/thermal events: %+v, want 50 %% (one of two readings capped)", f)
	}
}

func TestWindowsFromRecords(t *testing.T) {
	t.Parallel()
	recs := []results.Record{
		{Step: 0, Warmup: true, IntendedNS: 0, DoneNS: 10},
		{Step: 0, IntendedNS: 5, DoneNS: 50},
		{Step: 0, IntendedNS: 3, DoneNS: 40},
		{Step: 1, IntendedNS: 60, DoneNS: 90},
	}
	w := WindowsFromRecords(recs)
	if w[0] != (Window{3, 50}) || w[1] != (Window{60, 90}) {
		t.Errorf("windows %+v", w)
	}
}

func TestSpearman(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		x, y []float64
		want float64
		ok   bool
	}{
		// Any increasing pair is perfectly rank-correlated.
		{"monotone", []float64{1, 2, 3, 4}, []float64{10, 100, 1000, 1e4}, 1, true},
		// Reversed order.
		{"reversed", []float64{1, 2, 3}, []float64{3, 2, 1}, -1, true},
		// Ties share their average rank.
		{"ties", []float64{1, 1, 2, 3}, []float64{1, 2, 3, 4}, 0.9486832980505138, true},
		// Too short.
		{"short", []float64{1, 2}, []float64{1, 2}, 0, false},
		// A constant series correlates with nothing.
		{"constant", []float64{5, 5, 5}, []float64{1, 2, 3}, 0, false},
	} {
		got, ok := Spearman(tc.x, tc.y)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Spearman = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLabelValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key, label, want string
		ok               bool
	}{
		// First label.
		{`DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"}`, "gpu", "0", true},
		// Later label.
		{`m{a="x",gpu="7"}`, "gpu", "7", true},
		// Escaped quote inside an earlier value.
		{`m{a="x\",gpu=\"9",gpu="3"}`, "gpu", "3", true},
		// A label whose name ends like the one asked for.
		{`m{xgpu="1"}`, "gpu", "", false},
		// No labels.
		{`m`, "gpu", "", false},
		// Unterminated.
		{`m{gpu="1`, "gpu", "", false},
	} {
		got, ok := LabelValue(tc.key, tc.label)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LabelValue(%q, %q) = %q, %v; want %q, %v", tc.key, tc.label, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{`m{gpu="0"}`, `m{a="\\",gpu="1"}`, `m{`, `m{a=`, `m{a="x"`, `{gpu="\n"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		v, ok := LabelValue(key, "gpu")
		if !ok && v != "" {
			t.Errorf("value %q without a label", v)
		}
		if ok && !strings.Contains(key, "gpu=") {
			t.Errorf("found gpu=%q in %q, which has no gpu label", v, key)
		}
	})
}
