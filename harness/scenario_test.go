package harness_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func TestScenarioExpansion(t *testing.T) {
	t.Parallel()
	p, err := harness.ParsePlan([]byte(`
seed: 7
targets:
  - {name: a, url: "http://127.0.0.1:1", model: m}
  - {name: b, url: "http://127.0.0.1:2", model: m}
load: {requests: 5}
scenarios:
  cold_start: {idle: 2s, requests: 3}
  long_context: {buckets: [1000, 2000]}
  streaming: {}
  connection: {concurrency: 2}
  throughput_split: {short_output: 8, long_output: 512}
`))
	if err != nil {
		t.Fatal(err)
	}
	steps := p.Steps()
	type want struct {
		scenario string
		conc     int
		requests int
		in, out  string // Dist.String(), "" = the dataset's
		stream   bool
		conn     string
		idle     time.Duration
	}
	// Each level once per target (a, then b), in this order.
	wants := []want{
		{harness.ScenarioColdStart, 1, 3, "", "", true, "reuse", 2 * time.Second}, // idle gap before every request
		{harness.ScenarioWarm, 1, 30, "", "", true, "reuse", 0},                   // warm reference, default count
		{harness.ScenarioLongContext, 1, 30, "fixed:1000", "fixed:32", true, "reuse", 0},
		{harness.ScenarioLongContext, 1, 30, "fixed:2000", "fixed:32", true, "reuse", 0},
		{harness.ScenarioStreaming, 4, 100, "", "", true, "reuse", 0},
		{harness.ScenarioNonStreaming, 4, 100, "", "", false, "reuse", 0}, // streaming off for this step only
		{harness.ScenarioConnReuse, 2, 100, "", "", true, "reuse", 0},
		{harness.ScenarioConnNew, 2, 100, "", "", true, "new", 0}, // a connection per request
		{harness.ScenarioShortOutput, 16, 200, "", "fixed:8", true, "reuse", 0},
		{harness.ScenarioLongOutput, 16, 200, "", "fixed:512", true, "reuse", 0},
	}
	if len(steps) != 2*len(wants) {
		t.Fatalf("%d steps, want %d", len(steps), 2*len(wants))
	}
	for i, w := range wants {
		for j, target := range []string{"a", "b"} {
			s := steps[2*i+j]
			if s.Target.Name != target || s.Scenario != w.scenario || s.Concurrency != w.conc || s.Requests != w.requests ||
				s.Stream != w.stream || s.Connection != w.conn || s.IdleBefore != w.idle ||
				(w.in != "" && s.InputTokens.String() != w.in) ||
				(w.out != "" && s.OutputTokens.String() != w.out) {
				t.Errorf("step %d: %+v, want %+v on %s", s.Index, s, w, target)
			}
		}
		// Compared targets get identical requests: the same seed per level.
		if steps[2*i].Seed != steps[2*i+1].Seed {
			t.Errorf("level %d: targets have different seeds", i)
		}
	}
}

func TestScenarioValidation(t *testing.T) {
	t.Parallel()
	base := "targets: [{name: a, url: \"http://127.0.0.1:1\", model: m}]\nload: {requests: 5}\n"
	cases := []struct {
		yaml, field string
	}{
		{"scenarios: {cold_start: {requests: 3}}", "cold_start.idle"}, // idle gap is required
		{
			"scenarios: {long_context: {buckets: [2048, 0]}}",
			"long_context.buckets[1]",
		}, // a bucket must be positive
		{"scenarios: {streaming: {requests: -1}}", "streaming.requests"},                       // negative count
		{"scenarios: {throughput_split: {short_output: 64, long_output: 32}}", "short_output"}, // short must be shorter
		{
			"scenarios: {long_context: {bukets: [1]}}",
			"bukets",
		}, // unknown field: a typo never runs silently
	}
	for _, c := range cases {
		_, err := harness.ParsePlan([]byte(base + c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.field)
		}
	}
	// Scenarios alone are something to run.
	if _, err := harness.ParsePlan([]byte("targets: [{name: a, url: \"http://127.0.0.1:1\", model: m}]\nscenarios: " +
		"{streaming: {}}\n")); err != nil {
		t.Errorf("scenarios-only plan rejected: %v", err)
	}
}

// TestColdStartScenario runs the cold-start scenario against the mock with a
// cold-start cost: every request after the idle gap pays it, the warm
// reference does not. The idle timeout is long enough that a busy
// machine's pause between two warm requests (or between the steps) does
// not make the mock cold again.
func TestColdStartScenario(t *testing.T) {
	t.Parallel()
	const coldCost, idleTimeout = 300 * time.Millisecond, 400 * time.Millisecond
	prof, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	prof.TTFT = 20 * time.Millisecond
	prof.ITL = 5 * time.Millisecond
	prof.ColdStart = coldCost
	prof.IdleTimeout = idleTimeout
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	p := basePlan(srv.URL)
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
	p.IgnoreEOS = true
	p.Scenarios = &harness.Scenarios{ColdStart: &harness.ColdStartScenario{
		Idle: harness.Duration(2 * idleTimeout), Requests: 3, WarmRequests: 5}}
	res, err := harness.Run(context.Background(), p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Summary.Steps) != 2 {
		t.Fatalf("steps: %+v", res.Summary.Steps)
	}
	cold, warm := res.Summary.Steps[0], res.Summary.Steps[1]
	if cold.Scenario != harness.ScenarioColdStart || cold.OK != 3 || warm.Scenario != harness.ScenarioWarm ||
		warm.OK != 5 {
		t.Fatalf("cold %+v\nwarm %+v", cold, warm)
	}
	// Every cold request pays the load time on top of TTFT; no warm one does.
	if cold.TTFT.Min < ms(prof.TTFT+coldCost) {
		t.Errorf("cold TTFT min %.1f ms < TTFT + cold start %.1f ms", cold.TTFT.Min, ms(prof.TTFT+coldCost))
	}
	if warm.TTFT.Max >= ms(prof.TTFT+coldCost) {
		t.Errorf("warm TTFT max %.1f ms: a warm request paid the cold start", warm.TTFT.Max)
	}
}

// TestLongContextCalibration sizes long-context prompts from the server's
// own prompt_tokens: against the mock, whose chat template adds a fixed
// overhead, measured buckets arrive at exactly the bucket's token count,
// where unmeasured ones arrive that overhead above it.
func TestLongContextCalibration(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, time.Millisecond, time.Millisecond)
	buckets := []int{512, 1024}
	for _, measure := range []bool{false, true} {
		p := basePlan(srv.URL)
		p.IgnoreEOS = true
		p.Scenarios = &harness.Scenarios{LongContext: &harness.LongContextScenario{
			Buckets: buckets, Requests: 2, OutputTokens: 2, MeasureTokenizer: measure}}
		dir := t.TempDir()
		res, err := harness.Run(context.Background(), p, dir)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
		if err != nil {
			t.Fatal(err)
		}
		lc := res.Info.Plan.Scenarios.LongContext
		for _, r := range recs {
			want := buckets[0]
			if r.Step == 1 {
				want = buckets[1]
			}
			if !measure {
				want += tokens.ChatTemplateOverhead // the mock's template on top of the words
			}
			if r.NIn != want {
				t.Errorf(
					"measure=%v step %d: prompt_tokens %d, want %d (scale %v, overhead %v)",
					measure,
					r.Step,
					r.NIn,
					want,
					lc.Scale,
					lc.Overhead,
				)
			}
		}
		// The measured mapping is kept in run.json for reruns.
		if measure && (lc.Scale != 1 || lc.Overhead != tokens.ChatTemplateOverhead) {
			t.Errorf("measured scale %v overhead %v, want 1 and %d", lc.Scale, lc.Overhead, tokens.ChatTemplateOverhead)
		}
	}
}
