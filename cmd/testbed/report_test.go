package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/report"
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

// TestReportDamaged damages one results directory in each way a killed
// run, a full disk or a stray edit can, and checks that `testbed report`
// still writes a report from the records that survive, says what was
// damaged, and never shows a figure no record supports.
func TestReportDamaged(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 2*time.Millisecond, time.Millisecond)
	in, _ := harness.ParseDist("fixed:8")
	outTok, _ := harness.ParseDist("fixed:4")
	p := harness.Plan{Name: "damaged", Seed: 1, IgnoreEOS: true,
		Targets: []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
		Dataset: harness.Dataset{InputTokens: in, OutputTokens: outTok},
		Load:    harness.Load{Concurrency: []int{1}, Requests: 4}}
	orig := filepath.Join(t.TempDir(), "run")
	if _, err := harness.Run(context.Background(), p, orig); err != nil {
		t.Fatal(err)
	}
	appendTo := func(name, s string) func(string) error {
		return func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(s)
			return err
		}
	}
	replace := func(name, s string) func(string) error {
		return func(dir string) error { return os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644) }
	}
	tests := []struct {
		name   string
		damage func(dir string) error
		note   string // what the warning must say
		ok     string // the table's OK cell for the step ("4" keeps every record)
	}{
		// A killed run: the last line is cut in the middle.
		{"torn last line", appendTo(results.RecordsFile, `{"id":"x","step":`), "incomplete", "4"},
		// Only a torn line: no record, still a report that says so.
		{"only a torn line", replace(results.RecordsFile, `{"id":"x","st`), "incomplete", ""},
		// No record at all beside an old summary.json: its figures are not shown.
		{"empty records", replace(results.RecordsFile, ""), "no record", ""},
		// A corrupt summary.json: figures rebuilt from the records.
		{"corrupt summary", replace(results.SummaryFile, `{"steps":[{`), "summary.json is damaged", "4"},
		// A corrupt run.json: plan and environment unknown, figures still there.
		{"corrupt run.json", replace(results.RunFile, "\x00garbage"), "run.json is damaged", "4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "run")
			if err := os.CopyFS(dir, os.DirFS(orig)); err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), []string{"report", dir}, &stdout, &stderr); err != nil {
				t.Fatalf("report: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.note) {
				t.Errorf("stderr does not say %q:\n%s", tc.note, stderr.String())
			}
			md, err := os.ReadFile(filepath.Join(dir, results.ReportMarkdown))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), tc.note) {
				t.Errorf("report.md does not say %q", tc.note)
			}
			r, err := report.Load(dir, analysis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range r.Summary.Steps {
				if tc.ok == "" && (s.OK != 0 || s.TTFT.Count != 0 || s.RequestsPerS != 0) {
					t.Errorf("step %d shows figures without records: ok %d, ttft n %d, %v req/s",
						s.Step, s.OK, s.TTFT.Count, s.RequestsPerS)
				}
				if tc.ok != "" && fmt.Sprint(s.OK) != tc.ok {
					t.Errorf("step %d: ok %d, want %s", s.Step, s.OK, tc.ok)
				}
			}
		})
	}
}

// TestRedactedPlan: credentials in a plan's headers and URL never reach
// run.json, report.md, report.html or the terminal; the server still gets them.
func TestRedactedPlan(t *testing.T) {
	t.Parallel()
	const secret = "sk-SECRET-4242"
	var got atomic.Value
	m := fixedMockServer(t, time.Millisecond, time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			got.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("Api-Key"))
		}
		u, _ := url.Parse(m.URL)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	yaml := "seed: 2\ntargets: [{name: mock, url: " + strings.Replace(srv.URL, "http://", "http://u:"+secret+"@", 1) +
		", model: m, headers: {Authorization: Bearer " + secret + ", api-key: " + secret +
		", X-Session-Token: " + secret + ", X-Team: blue}}]\n" +
		"dataset: {input_tokens: fixed:8, output_tokens: fixed:4}\nload: {concurrency: [1], requests: 2}\n"
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
	if v, _ := got.Load().(string); v != "Bearer "+secret+"|"+secret {
		t.Errorf("the server got %q: the credentials must still be sent", v)
	}
	for _, f := range []string{results.RunFile, results.ReportMarkdown, results.ReportHTML} {
		b, err := os.ReadFile(filepath.Join(res, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret", f)
		}
		if f == results.RunFile && (!strings.Contains(string(b), harness.Redacted) || !strings.Contains(string(b), "blue")) {
			t.Errorf("%s: credentials not marked redacted, or a plain header lost", f)
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), secret) {
		t.Error("the terminal shows the secret")
	}
}
