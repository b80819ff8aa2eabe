package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// TestReportFiles runs two short runs against the mock and checks that
// `testbed report DIR DIR -o OUT` writes analysis.json into each run and
// one report.md and report.html covering both into OUT.
func TestReportFiles(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 5*time.Millisecond, time.Millisecond)

	dir := t.TempDir()
	var runs []string
	for _, name := range []string{"before", "after"} {
		in, _ := harness.ParseDist("fixed:16")
		outTok, _ := harness.ParseDist("fixed:8")
		p := harness.Plan{Name: name, Seed: 1, IgnoreEOS: true,
			Targets: []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
			Dataset: harness.Dataset{InputTokens: in, OutputTokens: outTok},
			Load:    harness.Load{Concurrency: []int{1, 2}, Requests: 6}}
		d := filepath.Join(dir, name)
		if _, err := harness.Run(context.Background(), p, d); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, d)
	}
	out := filepath.Join(dir, "cmp")
	var stdout, stderr bytes.Buffer
	svgDir := filepath.Join(dir, "charts")
	if err := run(context.Background(), append([]string{"report", "-o", out, "-svg", svgDir}, runs...), &stdout, &stderr); err != nil {
		t.Fatalf("report: %v\n%s", err, stderr.String())
	}
	for _, d := range runs {
		b, err := os.ReadFile(filepath.Join(d, "analysis.json"))
		if err != nil {
			t.Fatal(err)
		}
		var a analysis.Analysis
		if err := json.Unmarshal(b, &a); err != nil || len(a.Knees) != 1 ||
			a.Knees[0].Ladder != analysis.LadderConcurrency {
			t.Errorf("%s/analysis.json: %v %+v", d, err, a.Knees)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, results.ReportMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	// The same target name in two runs is told apart by the run's name.
	for _, want := range []string{"## Conclusions", "**before/mock**", "**after/mock**", "## Limitations and uncertainty", "## Environment and parameters"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, results.ReportHTML)); err != nil {
		t.Error(err)
	}
	// The main chart as a standalone SVG file, e.g. for docs/img.
	if b, err := os.ReadFile(filepath.Join(svgDir, "chart-throughput-concurrency.svg")); err != nil ||
		!strings.Contains(string(b), "<svg") {
		t.Errorf("-svg: %v", err)
	}
	if !strings.Contains(stdout.String(), filepath.Join(out, results.ReportHTML)) {
		t.Errorf("stdout does not say where the report is:\n%s", stdout.String())
	}
}

// TestReportServerView runs a plan that scrapes the mock's vLLM-style
// metrics during the run: the report draws the server's queue and KV-cache
// use on the run's timeline.
func TestReportServerView(t *testing.T) {
	t.Parallel()
	prof, err := engine.Preset("llama3-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	prof.MaxNumSeqs = 4 // so requests wait and the queue shows
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := "seed: 2\ntargets: [{name: mock, url: " + srv.URL + ", model: m}]\n" +
		"dataset: {input_tokens: fixed:64, output_tokens: fixed:48}\nignore_eos: true\n" +
		"load: {concurrency: [2, 8], requests: 16}\n" +
		"server_metrics: {urls: [" + srv.URL + "/metrics], interval: 50ms}\n"
	if err := os.WriteFile(plan, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "res")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"run", plan, "-o", res}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if err := run(context.Background(), []string{"report", res}, &stdout, &stderr); err != nil {
		t.Fatalf("report: %v\n%s", err, stderr.String())
	}
	page, err := os.ReadFile(filepath.Join(res, results.ReportHTML))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="chart-server-queue-0"`, `data-name="running 127.0.0.1`, `data-name="waiting 127.0.0.1`, `data-name="KV cache 127.0.0.1`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %s", want)
		}
	}
	md, _ := os.ReadFile(filepath.Join(res, results.ReportMarkdown))
	if strings.Contains(string(md), "No server-side view") {
		t.Error("limitations say no server-side view although the run sampled one")
	}
}
