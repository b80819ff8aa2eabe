package fit

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/mockllm"
)

// The round trip over the wire: the real mock in engine mode behind HTTP,
// the real harness measuring it in real time, and the fit recovering the
// mock's β within 10 %. β is large (20 ms steps, 2 ms per decoding
// sequence) so that a few dozen requests separate the terms and a busy
// machine's timer noise (a fraction of a millisecond) stays small beside it.
func TestFitRoundTripHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time run of several seconds")
	}
	truth := testEngine(20000, 100, 2000, 8, 0, 0)
	m, err := mockllm.New(mockllm.WithProfile(truth), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	defer func() { srv.Close(); m.Close() }()

	in, _ := harness.ParseDist("uniform:100,800")
	out, _ := harness.ParseDist("uniform:8,24")
	plan := harness.Plan{
		Seed:      5,
		Targets:   []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
		Dataset:   harness.Dataset{InputTokens: in, OutputTokens: out},
		IgnoreEOS: true,
		Extra: []harness.StepSpec{
			{Scenario: "concurrency", Concurrency: 1, Requests: 6},
			{Scenario: "concurrency", Concurrency: 4, Requests: 16},
			{Scenario: "concurrency", Concurrency: 12, Requests: 36},
		},
	}
	res, err := harness.Run(context.Background(), plan, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fit, err := Dir(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fit.Print(&report)
	t.Log("\n" + report.String())
	if raceEnabled {
		// The flow ran (records, reconstruction, fit) for the race detector;
		// its slowed timings cannot be held to 10 %.
		t.Skip("timing assertions need the mock and client at full speed")
	}
	e := fit.Engine
	if e == nil {
		t.Fatalf("no engine fit: %v", fit.EngineErr)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"β0", e.Beta0US, truth.Beta0US},
		{"β1", e.Beta1US, truth.Beta1US},
		{"β2", e.Beta2US, truth.Beta2US},
	} {
		if !within(c.got, c.want, 0.10) {
			t.Errorf("%s = %.4g, want %.4g ± 10%%", c.name, c.got, c.want)
		}
	}
	// Most requests must agree with the reconstructed steps. Not all: on a
	// machine shared with other work, the mock's writes and the client's
	// reads of one step can spread past the next (the virtual-time tests
	// hold the reconstruction to the profile's 90 % gate).
	if e.Consistency < 0.75 {
		t.Errorf("reconstruction agrees with only %.1f%% of requests (notes %v)", 100*e.Consistency, fit.Notes)
	}
	if !e.Saturated || e.MaxNumSeqs != truth.MaxNumSeqs {
		t.Errorf("max_num_seqs %d (saturated %v), want %d", e.MaxNumSeqs, e.Saturated, truth.MaxNumSeqs)
	}
}
