package report

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
	"gopkg.in/yaml.v3"
)

// serveMock starts the real mock behind httptest with the profile file at
// path and returns its base URL.
func serveMock(t *testing.T, path string) string {
	t.Helper()
	prof, err := engine.LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL
}

// runPlan runs the plan file at path with its targets pointed at urls (by
// target name), with the client self-monitor on, and loads the results
// back. starved names the steps the monitor found client-bound: there the
// numbers measure this machine, not the mocks, and timing-dependent
// checks only log (the methodology's rule 16, applied to our own tests).
func runPlan(t *testing.T, path string, urls map[string]string) (r *Run, starved string) {
	t.Helper()
	plan, err := harness.LoadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{} // the plan's host:port → the mock's
	for i := range plan.Targets {
		u, ok := urls[plan.Targets[i].Name]
		if !ok {
			t.Fatalf("no mock for target %q", plan.Targets[i].Name)
		}
		hosts[hostOf(t, plan.Targets[i].URL)] = hostOf(t, u)
		plan.Targets[i].URL = u
	}
	// The plan scrapes its targets' /metrics: point those at the mocks too,
	// sampling often enough that every short step has its readings.
	if sm := plan.ServerMetrics; sm != nil {
		for i, raw := range sm.URLs {
			if h, ok := hosts[hostOf(t, raw)]; ok {
				sm.URLs[i] = strings.Replace(raw, hostOf(t, raw), h, 1)
			}
		}
		sm.Interval = harness.Duration(100 * time.Millisecond)
	}
	dir := t.TempDir()
	if _, err := harness.Run(context.Background(), plan, dir); err != nil {
		t.Fatal(err)
	}
	r, err = Load(dir, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, []*Run{r}); err != nil {
		t.Fatal(err)
	}
	if err := analysis.Write(dir, r.Analysis); err != nil {
		t.Fatal(err)
	}
	var bound []string
	n := 0
	for _, s := range r.Summary.Steps {
		if s.ClientBound {
			if n++; n == 1 {
				bound = append(
					bound,
					fmt.Sprintf("%s %s c=%d: %s", s.Target, s.Scenario, s.Concurrency, s.ClientBoundReason),
				)
			}
		}
	}
	if n > 0 {
		bound[0] = fmt.Sprintf("%d of %d steps client-bound, first %s", n, len(r.Summary.Steps), bound[0])
	}
	if raceEnabled {
		bound = append(bound, "the race detector slows client and mock several-fold")
	}
	return r, strings.Join(bound, "; ")
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// check fails the test on a timing-dependent finding, or only logs it when
// the client was starved (see runPlan).
func check(t *testing.T, starved string, format string, args ...any) {
	t.Helper()
	if starved != "" {
		t.Logf("not failing, the client was the bottleneck (%s): "+format, append([]any{starved}, args...)...)
		return
	}
	t.Errorf(format, args...)
}

// TestKneeExample runs the shipped examples/knee.yaml against the mock in
// engine mode with max_num_seqs 32: the analysis must find the throughput
// knee at the batch limit and the report must name it in its conclusions.
func TestKneeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 7-step ladder in real time (about 12 s)")
	}
	// Not parallel: the example measures real time, and the other example
	// running beside it would make this machine, not the mock, the limit.
	prof, err := engine.LoadProfile("../../examples/knee-mock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, starved := runPlan(
		t,
		"../../examples/knee.yaml",
		map[string]string{"mock": serveMock(t, "../../examples/knee-mock.yaml")},
	)

	if len(r.Analysis.Knees) != 1 {
		t.Fatalf("knees: %+v", r.Analysis.Knees)
	}
	k := r.Analysis.Knees[0]
	if k.ThroughputKnee == nil {
		check(t, starved, "no throughput knee found: %+v", k)
		return
	}
	// The batch holds MaxNumSeqs sequences: past it, requests wait and
	// throughput cannot grow. The ladder steps around 32 are 24 and 48,
	// so "≈ 32" is the step at 32, allowing one ladder step of noise on a
	// busy machine.
	slots := float64(prof.MaxNumSeqs)
	t.Logf(
		"throughput knee at %v (max_num_seqs %v), latency knee %v, best %v",
		*k.ThroughputKnee,
		slots,
		val(k.LatencyKnee),
		val(k.BestOperatingPoint),
	)
	if got := *k.ThroughputKnee; got < 24 || got > 48 {
		check(t, starved, "throughput knee at concurrency %v, want ≈ %v", got, slots)
	}
	// Past the knee, throughput is bounded by the engine: one token per
	// sequence per step, at most MaxNumSeqs sequences per decode step.
	ceiling := slots / ((prof.Beta0US + prof.Beta2US*slots) / 1e6)
	if k.MaxThroughput > ceiling*1.05 {
		t.Errorf("max throughput %.0f tok/s above the engine's ceiling %.0f", k.MaxThroughput, ceiling)
	}

	checkBound(t, r, starved, analysis.BoundBatchSlots)

	md := Markdown([]*Run{r})
	concl := section(md, "## Conclusions")
	m := regexp.MustCompile(`throughput knee at \*\*concurrency (\d+)\*\*`).FindStringSubmatch(concl)
	if m == nil {
		t.Fatalf("conclusions do not name the knee:\n%s", concl)
	}
	if n, _ := strconv.Atoi(m[1]); float64(n) != *k.ThroughputKnee {
		t.Errorf("conclusions name concurrency %d, analysis found %v", n, *k.ThroughputKnee)
	}
}

// TestKVCacheExample runs examples/kv.yaml against examples/kv-mock.yaml,
// whose KV cache holds about ten requests among 256 batch slots: the knee
// must be bound by the KV cache.
func TestKVCacheExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a ladder in real time")
	}
	r, starved := runShort(t, "../../examples/kv.yaml", "../../examples/kv-mock.yaml")
	checkBound(t, r, starved, analysis.BoundKVCache)
}

// TestComputeExample runs examples/compute.yaml against
// examples/compute-mock.yaml, whose step time grows by 1 ms per decoding
// sequence: the knee must be compute-bound.
func TestComputeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a ladder in real time")
	}
	r, starved := runShort(t, "../../examples/compute.yaml", "../../examples/compute-mock.yaml")
	checkBound(t, r, starved, analysis.BoundCompute)
}

// runShort runs a single-target example plan against its mock profile
// with steps cut to 800 ms, so the ladder takes a few seconds.
func runShort(t *testing.T, plan, profile string) (*Run, string) {
	t.Helper()
	p, err := harness.LoadPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	p.Load.Duration = harness.Duration(800 * time.Millisecond)
	short := filepath.Join(t.TempDir(), "plan.yaml")
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return runPlan(t, short, map[string]string{p.Targets[0].Name: serveMock(t, profile)})
}

// checkBound checks the saturation verdict end to end: every ladder step
// has its sampled resources in analysis.json, the knee names want first
// with its evidence, and report.md's conclusions carry the sentence.
func checkBound(t *testing.T, r *Run, starved, want string) {
	t.Helper()
	var a analysis.Analysis
	if err := results.ReadJSON(filepath.Join(r.Dir, results.AnalysisFile), &a); err != nil {
		t.Fatal(err)
	}
	// A starved sampler may catch too few readings in a short step: then
	// the step says so, and only a healthy run must have every figure.
	for _, s := range a.Steps {
		if s.Resources == nil {
			t.Errorf("step %s: no resources at all", s.Label)
			continue
		}
		_, okR := s.Resources.Value(analysis.FigRunning)
		_, okG := s.Resources.Value(analysis.FigGPUUtil)
		if !okR || !okG {
			check(t, starved, "step %s: running requests %v, GPU utilisation %v in its resources", s.Label, okR, okG)
		}
	}
	if len(a.Knees) != 1 {
		t.Fatalf("knees: %+v", a.Knees)
	}
	k := a.Knees[0]
	t.Logf("%s; bound_by %v, throughput knee bound by %v", k.Verdict, k.BoundBy, k.ThroughputBoundBy)
	if len(k.BoundBy) == 0 || k.BoundBy[0] != want {
		check(t, starved, "knee bound by %v, want %s first; evidence %+v", k.BoundBy, want, k.Evidence)
		return
	}
	if len(k.Evidence) == 0 || k.Evidence[0].Resource != want || len(k.Evidence[0].Figures) == 0 {
		t.Errorf("evidence %+v, want %s's figures first", k.Evidence, want)
	}
	md, err := os.ReadFile(filepath.Join(r.Dir, results.ReportMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	if concl := section(string(md), "## Conclusions"); !strings.Contains(concl, k.Verdict) {
		t.Errorf("conclusions lack the verdict %q:\n%s", k.Verdict, concl)
	}
}

// section returns the Markdown from heading to the next heading of the
// same level.
func section(md, heading string) string {
	i := strings.Index(md, heading)
	if i < 0 {
		return ""
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	rest := md[i+len(heading):]
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return heading + rest
}

func val(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}
