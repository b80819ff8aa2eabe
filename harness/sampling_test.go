package harness_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestRunWatches: one call to Run honours the whole plan. It scrapes the
// server's metrics and watches the client process beside the load, the
// samples share the records' time axis, and histograms.jsonl holds the
// step's latencies in lossless form.
func TestRunWatches(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, 5*time.Millisecond, time.Millisecond)
	p := basePlan(srv.URL)
	p.Extra = []harness.StepSpec{{Scenario: "concurrency", Concurrency: 1, Requests: 4}}
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
	p.ServerMetrics = &harness.ServerMetrics{
		URLs:     []string{srv.URL + "/metrics"},
		Interval: harness.Duration(20 * time.Millisecond),
	}
	res, err := harness.Run(context.Background(), p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := results.ReadRecords(filepath.Join(res.Dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, r := range recs {
		last = max(last, r.DoneNS)
	}
	samples, err := results.ReadSamples(filepath.Join(res.Dir, results.ServerMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 2 {
		t.Fatalf("%d scrapes, want one at the start and one at the end at least", len(samples))
	}
	if first, end := samples[0], samples[len(samples)-1]; first.Offset < 0 || first.Offset > recs[0].SentNS ||
		end.Offset < last {
		t.Errorf("scrapes span %v..%v, records %v..%v: not on one axis",
			time.Duration(first.Offset), time.Duration(end.Offset), time.Duration(recs[0].SentNS), time.Duration(last))
	}
	if _, ok := samples[0].Family("vllm:num_requests_running"); !ok {
		t.Errorf("first scrape has no running gauge: %v", samples[0].Metrics)
	}
	hists, err := results.ReadLines[results.StepHistograms](filepath.Join(res.Dir, results.HistogramsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(hists) != 1 || hists[0].Metrics["ttft_ms"].Stats() != res.Summary.Steps[0].TTFT {
		t.Errorf("histograms.jsonl %+v does not restate summary.json's TTFT %+v", hists, res.Summary.Steps[0].TTFT)
	}
	clientSamples, verdicts, err := results.ReadClient(filepath.Join(res.Dir, results.ClientFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(clientSamples) == 0 || len(verdicts) != 1 || verdicts[0].StepIndex != 0 {
		t.Errorf(
			"client.jsonl: %d samples, verdicts %+v; want samples and one verdict for step 0",
			len(clientSamples),
			verdicts,
		)
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
	if _, err := harness.ParsePlan([]byte("targets: [{name: v, url: \"http://h\", model: m}]\nload: {concurrency: [1], " +
		"requests: 1}\ngpu: {nvlm: true}\n")); err == nil {
		t.Error("a misspelt gpu field was accepted")
	}
}
