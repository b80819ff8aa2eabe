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

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// TestRunAndReport runs a plan file against the mock, then checks that
// `testbed report` rebuilds the same summary from requests.jsonl alone.
func TestRunAndReport(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 5*time.Millisecond, time.Millisecond)

	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := fmt.Sprintf(`
seed: 5
targets:
  - {name: mock, url: %q, model: m}
dataset: {input_tokens: "uniform:16,64", output_tokens: "fixed:8"}
load: {concurrency: [1, 3], rate: [50], requests: 12, warmup: 1}
ignore_eos: true
slo: {ttft: 1s}
`, srv.URL)
	if err := os.WriteFile(plan, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "res")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"run", plan, "-o", out}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	for _, f := range []string{results.RecordsFile, results.RunFile, results.SummaryFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "TTFT p50") || !strings.Contains(stdout.String(), "39 requests recorded") {
		t.Errorf("run output:\n%s", stdout.String())
	}
	var rep bytes.Buffer
	if err := run(context.Background(), []string{"report", out}, &rep, &stderr); err != nil {
		t.Fatal(err)
	}
	// The report's rows must equal the run's rows (client-bound flags come
	// from the live monitor and are not in the records, so compare without them).
	rows := func(s string) []string {
		var r []string
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(strings.ReplaceAll(l, "!client-bound", ""))
			if strings.HasPrefix(l, "0 ") || strings.HasPrefix(l, "1 ") || strings.HasPrefix(l, "2 ") {
				r = append(r, strings.Join(strings.Fields(l), " "))
			}
		}
		return r
	}
	got, want := rows(rep.String()), rows(stdout.String())
	if len(want) != 3 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf(
			"report rows differ from run rows:\nrun:\n%s\nreport:\n%s",
			strings.Join(want, "\n"),
			strings.Join(got, "\n"),
		)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("targets: [{name: a, url: 'nope', model: m}]\nload: {concurrency: [1], requests: "+
		"1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no plan", []string{"run"}, "exactly one plan"},                                   // a plan is required
		{"missing file", []string{"run", filepath.Join(dir, "none.yaml")}, "no such file"}, // unreadable plan
		{
			"invalid plan",
			[]string{"run", bad},
			"targets[0].url",
		}, // validation names the field
		{"report no dir", []string{"report"}, "one results directory"},  // report needs a directory
		{"report empty dir", []string{"report", dir}, "requests.jsonl"}, // and records in it
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDemo runs a tiny demo end to end: in-process mock, ladder, table, files.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-o", dir, "--concurrency", "1,2", "--rounds", "1", "--output-tokens", "fixed:8"}, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	// Two steps of 12 measured requests plus one warm-up round each (1 + 2).
	if len(recs) != 27 {
		t.Errorf("%d records, want 27", len(recs))
	}
	for _, want := range []string{"c=1", "c=2", "testbed report " + dir, results.ReportHTML} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout.String())
		}
	}
	// The demo's report is written, and its path printed, ready to open.
	if _, err := os.Stat(filepath.Join(dir, results.ReportHTML)); err != nil {
		t.Errorf("no report.html: %v", err)
	}
}

// fixedMockServer serves the mock in fixed mode (model "m") behind httptest
// for the length of the test.
func fixedMockServer(t *testing.T, ttft, itl time.Duration) *httptest.Server {
	t.Helper()
	prof, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	prof.TTFT, prof.ITL = ttft, itl
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	return srv
}

// TestProgressBar: the terminal line shows the step's bar, elapsed and
// remaining time, whether the step is bounded by requests or by time.
func TestProgressBar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    harness.Progress
		want []string
	}{
		// Half of 100 requests in 10 s: 10 s left.
		{"by requests", harness.Progress{Step: 0, Steps: 2, Label: "m c=4", Done: 50, StepTotal: 100,
			Elapsed: 10 * time.Second}, []string{"[1/2] m c=4", "██████████··········", " 50%", "10s elapsed, 10s left"}},
		// 90 s into a 2-minute step.
		{"by time", harness.Progress{Steps: 1, Label: "m r=5", StepDuration: 2 * time.Minute, Elapsed: 90 * time.Second},
			[]string{" 75%", "1m30s elapsed, 30s left"}},
		// Nothing finished yet: no estimate.
		{"no estimate", harness.Progress{Steps: 1, Label: "m c=1", StepTotal: 10, Elapsed: time.Second},
			[]string{"  0%", "1s elapsed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			line := progressBar(tc.p, 200)
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q lacks %q", line, w)
				}
			}
			if n := len([]rune(progressBar(tc.p, 40))); n > 39 {
				t.Errorf("line of %d runes for a 40-column terminal", n)
			}
		})
	}
}
