package harness_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestWithStart: offsets in the records count from the caller's start, so
// samplers given the same start share the records' time axis.
func TestWithStart(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, 5*time.Millisecond, time.Millisecond)
	p := basePlan(srv.URL)
	p.Extra = []harness.StepSpec{{Scenario: "concurrency", Concurrency: 1, Requests: 2}}
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
	start := time.Now().Add(-time.Hour) // keeps the monotonic reading
	res, err := harness.Run(context.Background(), p, t.TempDir(), harness.WithStart(start))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := results.ReadRecords(filepath.Join(res.Dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.IntendedNS < int64(time.Hour) || r.SentNS < int64(time.Hour) || r.DoneNS < r.SentNS {
			t.Errorf("%s: intended %v sent %v; want both after the hour-old start", r.ID, time.Duration(r.IntendedNS), time.Duration(r.SentNS))
		}
	}
	if !res.Info.Start.Equal(start) {
		t.Errorf("run.json start %v, want the caller's %v", res.Info.Start, start)
	}
}

// TestPlanSamplingSections parses the server_metrics and gpu sections.
func TestPlanSamplingSections(t *testing.T) {
	t.Parallel()
	p, err := harness.ParsePlan([]byte(`
targets: [{name: v, url: "http://vllm:8000", model: m}]
load: {concurrency: [1], requests: 1}
server_metrics:
  urls: ["http://vllm:8000/metrics", "http://dcgm:9400/metrics"]
  interval: 500ms
  series: ["vllm:*", "DCGM_FI_DEV_GPU_UTIL"]
gpu: {nvml: true, interval: 2s}
`))
	if err != nil {
		t.Fatal(err)
	}
	sm, g := p.ServerMetrics, p.GPU
	if sm == nil || len(sm.URLs) != 2 || sm.Interval.D() != 500*time.Millisecond || len(sm.Series) != 2 {
		t.Errorf("server_metrics = %+v", sm)
	}
	if g == nil || !g.NVML || g.Interval.D() != 2*time.Second {
		t.Errorf("gpu = %+v", g)
	}
	if _, err := harness.ParsePlan([]byte("targets: [{name: v, url: \"http://h\", model: m}]\nload: {concurrency: [1], requests: 1}\ngpu: {nvlm: true}\n")); err == nil {
		t.Error("a misspelt gpu field was accepted")
	}
}
