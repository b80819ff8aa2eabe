package fit

import (
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// testLoadServer grows TTFT by 6 ms and ITL by 1.5 ms per extra request in
// flight, TTFT by 10 µs per prompt token, with 5 % lognormal jitter.
func testLoadServer() *loadServer {
	return &loadServer{
		ttftBase: 20 * time.Millisecond, ttftPerReq: 6 * time.Millisecond, ttftPerPromptToken: 10 * time.Microsecond,
		itlBase: 6 * time.Millisecond, itlPerReq: 1500 * time.Microsecond, cv: 0.05, seed: 3,
	}
}

// The load-curve round trip in virtual time: a server whose latency grows
// with load, each request on its own clock, is measured over a ladder and
// fitted; the fit chooses load_curve, and the fitted profile, replayed by
// the mock's scheduler over the same ladder, gives every step's TTFT and
// ITL within 10 % at p50 and 25 % at p99. The HTTP test does the same in
// real time; this one is exact and fast, so it holds under the race
// detector and on a busy machine.
func TestFitLoadCurveRoundTrip(t *testing.T) {
	t.Parallel()
	recs := simulateLoadServer(t, testLoadServer(), []int{1, 2, 4, 8, 16}, 48, 9)
	res, err := Records(recs)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.Print(&out)
	t.Log("\n" + out.String())
	if res.Profile.Mode != engine.ModeLoadCurve {
		t.Fatalf("chose %s, want load_curve", res.Profile.Mode)
	}
	names := [4]string{"TTFT p50", "TTFT p99", "ITL p50", "ITL p99"}
	tol := [4]float64{0.10, 0.25, 0.10, 0.25}
	for _, s := range splitSteps(recs) {
		sim, err := engine.Simulate(res.Profile, simLoad(s.recs), engine.WithSeed(2))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := measure(s.recs, nil)
		got, _ := measure(s.recs, sim)
		t.Logf("%s: server %.2f / %.2f / %.2f / %.2f ms, replay %.2f / %.2f / %.2f / %.2f ms (TTFT p50/p99, ITL p50/p99)",
			s.label, want[0], want[1], want[2], want[3], got[0], got[1], got[2], got[3])
		for i := range want {
			if !within(got[i], want[i], tol[i]) {
				t.Errorf("%s %s: replay %.2f ms, server %.2f ms (want within %.0f%%)",
					s.label, names[i], got[i], want[i], 100*tol[i])
			}
		}
	}
	v := res.Profile.Validity
	if v.MinInFlight != 1 || v.MaxInFlight != 16 || v.MinPromptTokens < 100 || v.MaxPromptTokens > 800 {
		t.Errorf("validity %+v, want 1–16 in flight and prompts within 100–800", v)
	}
	// TTFT's prompt term is recovered (10 µs per token).
	if k := res.Profile.LoadCurve.TTFTPerPromptTokenUS; !within(k, 10, 0.25) {
		t.Errorf("TTFT per prompt token %.2f µs, want 10 ± 25%%", k)
	}
}

// --mode picks the mode whatever the scores; a mode that cannot be fitted
// is an error, and an unknown one is named.
func TestFitForcedMode(t *testing.T) {
	t.Parallel()
	recs := simulateLoadServer(t, testLoadServer(), []int{1, 4}, 16, 4)
	tests := []struct {
		mode, want, err string
	}{
		// Forcing fixed overrides the scores.
		{engine.ModeFixed, engine.ModeFixed, ""},
		{engine.ModeLoadCurve, engine.ModeLoadCurve, ""},
		// auto is the default.
		{ModeAuto, engine.ModeLoadCurve, ""},
		{"turbo", "", `fit: mode "turbo": want fixed, engine, load_curve or auto`},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			res, err := Records(recs, WithMode(tt.mode))
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Profile.Mode != tt.want {
				t.Errorf("mode %s, want %s", res.Profile.Mode, tt.want)
			}
		})
	}
}

// TTFT taken back to the reference prompt is never below 0: here every
// other request has a long prompt and a slow first token, so the slope is
// steep and a quick request with a long-enough prompt, taken back to the
// mean prompt, would come out negative.
func TestFitLoadCurveNeverNegative(t *testing.T) {
	t.Parallel()
	var recs []results.Record
	for i := range 40 {
		nin := 100 + 50*i
		ttft := int64(5e6)
		if i%2 == 0 {
			nin, ttft = 2000+10*i, int64(400e6) // long and slow: a steep slope
		}
		r := results.Record{Target: "t", Step: 0, Concurrency: 1, Stream: true, SentNS: int64(i) * 1e9,
			FirstTokenNS: int64(i)*1e9 + ttft, NIn: nin, NOut: 30}
		for range 29 {
			r.ChunkGapsNS = append(r.ChunkGapsNS, 1e6)
		}
		r.LastTokenNS = r.FirstTokenNS + 29e6
		r.DoneNS = r.LastTokenNS
		recs = append(recs, r)
	}
	lc, err := fitLoadCurve(recs)
	if err != nil {
		t.Fatal(err)
	}
	if p1 := lc.Curve.Levels[0].TTFT.P1; p1 < 0 {
		t.Errorf("TTFT p1 %v below 0", p1)
	}
}
