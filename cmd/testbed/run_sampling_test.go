package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/gpu"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestRunSamplesServerMetrics runs a plan with a server_metrics section
// against the real mock: server_metrics.jsonl lands beside requests.jsonl,
// on the same clock — a scrape taken while no request was in flight (by the
// records) never sees one running, some scrape during the load does, and
// the last one counts every generated token.
func TestRunSamplesServerMetrics(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 30*time.Millisecond, 5*time.Millisecond)

	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := fmt.Sprintf(`
seed: 5
targets:
  - {name: mock, url: %q, model: m}
dataset: {input_tokens: "fixed:16", output_tokens: "fixed:20"}
load: {concurrency: [2], requests: 10}
ignore_eos: true
server_metrics:
  urls: [%q]
  interval: 10ms
  series: ["vllm:num_requests_running", "vllm:generation_tokens_total"]
`, srv.URL, srv.URL+"/metrics")
	if err := os.WriteFile(plan, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "res")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"run", plan, "-o", out}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	recs, err := results.ReadRecords(filepath.Join(out, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := results.ReadSamples(filepath.Join(out, results.ServerMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 || len(samples) < 3 {
		t.Fatalf("%d records, %d samples", len(recs), len(samples))
	}
	var first, last int64 = 1 << 62, 0 // span of the load on the records' clock
	var tokens int
	for _, r := range recs {
		if !r.OK() {
			t.Fatalf("request failed: %+v", r)
		}
		first, last = min(first, r.SentNS), max(last, r.DoneNS)
		tokens += r.NOut
	}
	running, gen := `vllm:num_requests_running{model_name="m"}`, `vllm:generation_tokens_total{model_name="m"}`
	sawLoad := false
	for _, s := range samples {
		if s.Error != "" {
			t.Fatalf("scrape failed: %s", s.Error)
		}
		inFlight := s.Metrics[running]
		// A scrape that ended before the first send or began after the last
		// response cannot see a running request; if it does, the clocks differ.
		if (s.Offset+s.Took < first || s.Offset > last) && inFlight != 0 {
			t.Errorf(
				"scrape at %v saw %v running, outside the load [%v, %v]",
				time.Duration(s.Offset),
				inFlight,
				time.Duration(first),
				time.Duration(last),
			)
		}
		if inFlight > 0 {
			sawLoad = true
			if s.Offset+s.Took < first || s.Offset > last {
				t.Errorf("load seen at %v, outside the records' span", time.Duration(s.Offset))
			}
		}
	}
	if !sawLoad {
		t.Errorf("no scrape of %d saw a request running", len(samples))
	}
	if got := samples[len(samples)-1].Metrics[gen]; int(got) != tokens {
		t.Errorf("last scrape counts %v generated tokens, records %d", got, tokens)
	}
}

// TestRunGPUSectionNeedsNVML: a plan asking for NVML on a host without it
// fails before any load, naming the field.
func TestRunGPUSectionNeedsNVML(t *testing.T) {
	t.Parallel()
	if n, err := gpu.OpenNVML(); err == nil {
		n.Close()
		t.Skip("this host has NVML")
	}
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := `
targets:
  - {name: mock, url: "http://127.0.0.1:1", model: m}
dataset: {input_tokens: "fixed:16", output_tokens: "fixed:4"}
load: {concurrency: [1], requests: 1}
gpu: {nvml: true}
`
	if err := os.WriteFile(plan, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(
		context.Background(),
		[]string{"run", plan, "-o", filepath.Join(dir, "res")},
		&bytes.Buffer{},
		&bytes.Buffer{},
	)
	if err == nil || !strings.Contains(err.Error(), "gpu.nvml") ||
		!strings.Contains(err.Error(), "NVML not available") {
		t.Errorf("run = %v, want the gpu.nvml error", err)
	}
}

// TestBenchSamplingFlags: bench's --server-metrics and --nvml fill the
// plan's sections.
func TestBenchSamplingFlags(t *testing.T) {
	t.Parallel()
	p, _, err := benchPlan([]string{"--url", "http://127.0.0.1:8000", "--model", "m",
		"--server-metrics", "http://127.0.0.1:8000/metrics", "--server-metrics", "http://127.0.0.1:9400/metrics",
		"--nvml", "--sample-interval", "250ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p.ServerMetrics == nil || len(p.ServerMetrics.URLs) != 2 ||
		p.ServerMetrics.Interval.D() != 250*time.Millisecond {
		t.Errorf("server_metrics = %+v", p.ServerMetrics)
	}
	if p.GPU == nil || !p.GPU.NVML || p.GPU.Interval.D() != 250*time.Millisecond {
		t.Errorf("gpu = %+v", p.GPU)
	}
	p, _, err = benchPlan([]string{"--url", "http://127.0.0.1:8000", "--model", "m"}, &bytes.Buffer{})
	if err != nil || p.ServerMetrics != nil || p.GPU != nil {
		t.Errorf("without flags: %+v %+v %v", p.ServerMetrics, p.GPU, err)
	}
}

// TestRunWarnsOnFailedScrapes: an unreachable metrics endpoint does not
// fail the load run, but every failed scrape stays in the file and the
// user is told.
func TestRunWarnsOnFailedScrapes(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 5*time.Millisecond, time.Millisecond)
	dead := httptest.NewServer(nil)
	dead.Close()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := fmt.Sprintf(`
targets: [{name: mock, url: %q, model: m}]
dataset: {input_tokens: "fixed:16", output_tokens: "fixed:4"}
load: {concurrency: [1], requests: 3}
server_metrics: {urls: [%q], interval: 20ms}
`, srv.URL, dead.URL+"/metrics")
	if err := os.WriteFile(plan, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "res")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"run", plan, "-o", out}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	samples, err := results.ReadSamples(filepath.Join(out, results.ServerMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if s.Error == "" || !strings.Contains(s.Error, dead.URL) {
			t.Errorf("sample %+v, want the connection error naming the URL", s)
		}
	}
	want := fmt.Sprintf("%d of %d readings failed", len(samples), len(samples))
	if len(samples) < 2 || !strings.Contains(stderr.String(), want) {
		t.Errorf("%d samples; stderr %q lacks %q", len(samples), stderr.String(), want)
	}
}
