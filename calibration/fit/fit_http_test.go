package fit

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/wake"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
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
	if fit.Profile.Mode != engine.ModeEngine {
		t.Errorf("chose %s, want engine: a lockstep engine is best told by its step model", fit.Profile.Mode)
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

// loadLadder is the short ladder of the load-curve round trip: the same
// plan (seed, prompts, output lengths) measures the server and the mock.
func loadLadder(url string) harness.Plan {
	in, _ := harness.ParseDist("uniform:100,800")
	out, _ := harness.ParseDist("uniform:6,14")
	return harness.Plan{
		Seed:      11,
		Targets:   []harness.Target{{Name: "srv", URL: url, Model: "m"}},
		Dataset:   harness.Dataset{InputTokens: in, OutputTokens: out},
		IgnoreEOS: true,
		Extra: []harness.StepSpec{
			{Scenario: "concurrency", Concurrency: 1, Requests: 16},
			{Scenario: "concurrency", Concurrency: 2, Requests: 20},
			{Scenario: "concurrency", Concurrency: 4, Requests: 32},
			{Scenario: "concurrency", Concurrency: 8, Requests: 48},
		},
	}
}

// The round trip against a server that is not the mock's engine: a test
// server whose TTFT and ITL grow with the requests in flight, each request
// sleeping on its own (no shared step), is measured over a ladder, fitted,
// and the fitted profile, written and loaded as a file, is served by the
// mock and measured over the same ladder. The fit must choose load_curve,
// and every step's TTFT and ITL must come back within 10 % at p50 and 25 %
// at p99. The latencies are tens of milliseconds so that a busy machine's
// timer noise (a fraction of a millisecond) stays small beside them.
func TestFitRoundTripHTTPLoadCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time run of several seconds")
	}
	ls := &loadServer{
		ttftBase: 30 * time.Millisecond, ttftPerReq: 9 * time.Millisecond, ttftPerPromptToken: 15 * time.Microsecond,
		itlBase: 9 * time.Millisecond, itlPerReq: 2250 * time.Microsecond, cv: 0.05, seed: 3,
		waker: wake.New(),
	}
	defer ls.waker.Close()
	srv := httptest.NewServer(ls)
	defer srv.Close()
	measured, err := harness.Run(context.Background(), loadLadder(srv.URL), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fit, err := Dir(measured.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fit.Print(&report)
	t.Log("\n" + report.String())
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := fit.WriteProfile(path); err != nil {
		t.Fatal(err)
	}
	p, err := engine.LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	mock := httptest.NewServer(m)
	defer func() { mock.Close(); m.Close() }()
	replayed, err := harness.Run(context.Background(), loadLadder(mock.URL), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := stepFigures(t, measured.Dir)
	got := stepFigures(t, replayed.Dir)
	if raceEnabled {
		t.Skip("timing assertions need the server, the mock and the client at full speed")
	}
	if p.Mode != engine.ModeLoadCurve {
		t.Errorf("chose %s, want load_curve for a server without a shared step", p.Mode)
	}
	names := [4]string{"TTFT p50", "TTFT p99", "ITL p50", "ITL p99"}
	tol := [4]float64{0.10, 0.25, 0.10, 0.25}
	// A p99 is one write in a hundred: when more than that share of the
	// server's or the mock's writes missed their time by over a millisecond
	// (each counts its own), the p99s timed the machine, not the model.
	// Likewise the p50s, when more than a tenth did.
	mockLate := mockLateShare(t, m)
	late := fmt.Sprintf("%.1f%% of the server's and %.1f%% of the mock's token writes were over 1 ms late",
		100*ls.lateShare(), 100*mockLate)
	tails := ls.lateShare() <= 0.01 && mockLate <= 0.01
	if !tails {
		t.Logf("p99s not judged: %s", late)
	}
	for step, w := range want {
		g := got[step]
		t.Logf("%s: server %.2f / %.2f / %.2f / %.2f ms, mock %.2f / %.2f / %.2f / %.2f ms (TTFT p50/p99, ITL p50/p99)",
			w.label, w.fig[0], w.fig[1], w.fig[2], w.fig[3], g.fig[0], g.fig[1], g.fig[2], g.fig[3])
	}
	if ls.lateShare() > 0.10 || mockLate > 0.10 {
		t.Skipf("not judged: %s: the machine is too busy to time either", late)
	}
	judged := 0
	for step, w := range want {
		g := got[step]
		// A step whose client was starved of CPU (the harness's own
		// verdict) timed the machine's scheduler, not the server or the mock.
		if why := clientBound(measured, replayed, step); why != "" {
			t.Logf("%s: not judged: %s", w.label, why)
			continue
		}
		judged++
		for i := range w.fig {
			if i%2 == 1 && !tails {
				continue
			}
			if !within(g.fig[i], w.fig[i], tol[i]) {
				t.Errorf("%s %s: mock %.2f ms, server %.2f ms (want within %.0f%%)",
					w.label, names[i], g.fig[i], w.fig[i], 100*tol[i])
			}
		}
	}
	if judged == 0 {
		t.Skip("every step was client-bound on this machine: nothing to judge")
	}
}

// clientBound says why step of either run was client-bound, or "".
func clientBound(a, b *harness.Outcome, step int) string {
	for _, o := range []*harness.Outcome{a, b} {
		for _, s := range o.Summary.Steps {
			if s.Step == step && s.ClientBound {
				return "client-bound: " + s.ClientBoundReason
			}
		}
	}
	return ""
}

// figures are one step's TTFT and ITL p50 and p99 in ms.
type figures struct {
	label string
	fig   [4]float64
}

// stepFigures reads a run's records and measures each step.
func stepFigures(t *testing.T, dir string) []figures {
	t.Helper()
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []figures
	for _, s := range splitSteps(recs) {
		f, ok := measure(s.recs, nil)
		if !ok {
			t.Fatalf("step %s has no measured request", s.label)
		}
		out = append(out, figures{s.label, f})
	}
	return out
}

// mockLateShare is the share of the mock's writes more than a millisecond
// after their due time, from its emission-lateness histogram.
func mockLateShare(t *testing.T, m *mockllm.Server) float64 {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "testbed_mock_emission_lateness_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 0.001 {
				return 1 - float64(b.GetCumulativeCount())/math.Max(1, float64(h.GetSampleCount()))
			}
		}
	}
	t.Fatal("the mock has no emission-lateness histogram with a 1 ms bound")
	return 0
}
