package harness

import (
	"strings"
	"testing"
	"time"
)

const goodPlan = `
name: ladder
seed: 7
targets:
  - name: mock
    url: http://127.0.0.1:8000/v1
    model: m
  - name: tgi
    url: http://127.0.0.1:8001
    api: tgi
dataset:
  input_tokens: uniform:64,256
  output_tokens: lognormal:128,40
load:
  concurrency: [1, 4]
  rate: [10]
  arrival: gamma
  burstiness: 0.5
  requests: 20
  duration: 30s
  warmup: 2
slo:
  ttft: 500ms
steps:
  - scenario: long_context
    concurrency: 1
    input_tokens: fixed:2048
`

func TestParsePlan(t *testing.T) {
	t.Parallel()
	p, err := ParsePlan([]byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	if p.Dataset.InputTokens.String() != "uniform:64,256" || p.Load.Duration.D() != 30*time.Second ||
		p.SLO.TTFT.D() != 500*time.Millisecond {
		t.Errorf("parsed %+v", p)
	}
	if p.Targets[0].API != APIChat || p.Connection != "reuse" || p.HTTP != "1.1" || !p.Streaming() {
		t.Errorf("defaults not applied: %+v", p)
	}
	steps := p.Steps()
	// (2 concurrency + 1 rate + 1 extra) levels × 2 targets, targets interleaved per level.
	if len(steps) != 8 {
		t.Fatalf("got %d steps, want 8", len(steps))
	}
	if steps[0].Target.Name != "mock" || steps[1].Target.Name != "tgi" || steps[0].Seed != steps[1].Seed {
		t.Errorf("targets at one level must alternate and share a seed: %+v %+v", steps[0], steps[1])
	}
	if steps[0].Seed == steps[2].Seed {
		t.Errorf("different levels share a seed")
	}
	if s := steps[6]; s.Scenario != "long_context" || s.InputTokens.String() != "fixed:2048" ||
		s.OutputTokens.String() != "lognormal:128,40" ||
		s.Warmup != 2 {
		t.Errorf("extra step not resolved: %+v", s)
	}
	if s := steps[4]; s.Rate != 10 || s.Arrival != "gamma" || s.Burstiness != 0.5 {
		t.Errorf("rate step: %+v", s)
	}
}

func TestParsePlanErrors(t *testing.T) {
	t.Parallel()
	base := "targets: [{name: a, url: 'http://h:1', model: m}]\nload: {concurrency: [1], requests: 5}\n"
	tests := []struct {
		name, yaml, want string
	}{
		// A misspelled key is an error, not silently ignored.
		{"unknown field", base + "lod: {}\n", "field lod is not a plan key"},
		// No targets at all.
		{"no targets", "load: {concurrency: [1], requests: 1}\n", "plan: line 1: targets: at least one target"},
		// An empty plan says so.
		{"empty", "\n# nothing yet\n", "the file is empty"},
		// A plan that is not a mapping.
		{"list", "- a\n- b\n", "a plan is a mapping"},
		// Bad URL names the target index and field.
		{
			"bad url",
			"targets: [{name: a, url: 'ftp://h', model: m}]\nload: {concurrency: [1], requests: 1}\n",
			"targets[0].url",
		},
		// Unknown API kind.
		{
			"bad api",
			"targets: [{name: a, url: 'http://h', model: m, api: grpc}]\nload: {concurrency: [1], requests: 1}\n",
			`targets[0].api: "grpc" is not one of`,
		},
		// OpenAI APIs need a model.
		{
			"no model",
			"targets: [{name: a, url: 'http://h'}]\nload: {concurrency: [1], requests: 1}\n",
			"targets[0].model",
		},
		// Duplicate target names would merge their records.
		{
			"dup names",
			"targets: [{name: a, url: 'http://h', model: m}, {name: a, url: 'http://g', model: m}]\nload: {concurrency: [1], " +
				"requests: 1}\n",
			`"a" is used twice`,
		},
		// A step needs an end.
		{
			"no end",
			"targets: [{name: a, url: 'http://h', model: m}]\nload: {concurrency: [1]}\n",
			"load.requests: set requests or duration",
		},
		// Nothing to run.
		{
			"no load",
			"targets: [{name: a, url: 'http://h', model: m}]\nload: {requests: 3}\n",
			"load: set concurrency, rate or steps",
		},
		// Concurrency below 1.
		{
			"zero concurrency",
			"targets: [{name: a, url: 'http://h', model: m}]\nload: {concurrency: [0], requests: 1}\n",
			"load.concurrency: 0 is out of range",
		},
		// Negative rate.
		{
			"negative rate",
			"targets: [{name: a, url: 'http://h', model: m}]\nload: {rate: [-1], requests: 1}\n",
			"load.rate",
		},
		// The minimal plan is valid.
		{"minimal", base, ""},
		// Unknown arrival kind.
		{
			"bad arrival",
			"targets: [{name: a, url: 'http://h', model: m}]\nload: {rate: [1], requests: 1, arrival: bursty}\n",
			"load.arrival",
		},
		// Bad distribution spec names the problem.
		{"bad dist", base + "dataset: {input_tokens: 'uniform:5'}\n", "uniform takes 2 number(s)"},
		// Bad duration.
		{"bad duration", base + "timeouts: {request: 5}\n", "want a number with a unit"},
		// Unknown connection mode and HTTP version.
		{"connection", base + "connection: pooled\nhttp: '3'\n", "connection: \"pooled\""},
		// An API key variable that is not set.
		{
			"key env",
			"targets: [{name: a, url: 'http://h', model: m, api_key_env: TESTBED_SURELY_UNSET_KEY}]\nload: {concurrency: [1], " +
				"requests: 1}\n",
			"TESTBED_SURELY_UNSET_KEY is not set",
		},
		// Extra steps need exactly one of concurrency or rate.
		{"step both", base + "steps: [{scenario: x, concurrency: 1, rate: 2}]\n", "steps: [0] needs exactly one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePlan([]byte(tc.yaml))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid plan rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPlanReportsAllErrors(t *testing.T) {
	t.Parallel()
	_, err := ParsePlan([]byte("targets: [{name: a, url: 'x', model: ''}]\nload: {concurrency: [0], requests: -1}\n"))
	if err == nil {
		t.Fatal("invalid plan accepted")
	}
	for _, field := range []string{"targets[0].url", "targets[0].model", "load.concurrency", "load.requests"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s:\n%v", field, err)
		}
	}
}

// TestPlanEveryProblemAtOnce: decoding problems (an unknown key, a bad
// duration, a bad distribution) and rule violations are reported together,
// each with its line, with no Go type name in sight.
func TestPlanEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	plan := "targets:\n" + // line 1
		"  - {name: a, url: 'x', model: m}\n" + // line 2: not a URL
		"dataset: {input_tokens: 'uniform:5'}\n" + // line 3: bad distribution
		"load: {concurrency: [0], requests: 1}\n" + // line 4: concurrency out of range
		"timeouts: {request: 5}\n" + // line 5: a duration without a unit
		"lod: {}\n" // line 6: not a plan key
	_, err := ParsePlan([]byte(plan))
	if err == nil {
		t.Fatal("invalid plan accepted")
	}
	for _, want := range []string{"line 2: targets[0].url", "line 3: distribution", "line 4: load.concurrency",
		"line 5: duration", "line 6: field lod is not a plan key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "harness.") {
		t.Errorf("error names a Go type:\n%v", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 5 {
		t.Errorf("%d problems reported, want 5:\n%v", n, err)
	}
}

// FuzzParsePlan checks the parser never panics and that an accepted plan
// always expands into steps with a target and an end.
func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(goodPlan))
	f.Add([]byte("targets: [{name: a, url: 'http://h', model: m}]\nload: {rate: [1e9], requests: 1}\n"))
	f.Add(
		[]byte(
			"targets: [{url: 'http://h', model: m}]\nload: {concurrency: [3], duration: 1s}\ndataset: {input_tokens: " +
				"'normal:1,0'}",
		),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePlan(b)
		if err != nil {
			return
		}
		for _, s := range p.Steps() {
			if s.Target.URL == "" || (s.Concurrency <= 0) == (s.Rate <= 0) || (s.Requests == 0 && s.Duration == 0) {
				t.Fatalf("accepted plan has an unrunnable step: %+v", s)
			}
		}
	})
}
