package analysis_test

import (
	"context"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// TestAnomaliesFromMock streams from the real mock with each streaming
// fault it can inject and checks that the analysis names it — and names
// nothing on a clean stream.
func TestAnomaliesFromMock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		faults mockllm.FaultConfig
		early  bool
		want   string // anomaly kind; "" = none at all
	}{
		{
			"clean",
			mockllm.FaultConfig{},
			false,
			"",
		}, // fixed mode with jitter: nothing to report
		{
			"pacing",
			mockllm.FaultConfig{PacingInterval: 100 * time.Millisecond},
			false,
			analysis.AnomalyPacing,
		}, // a gateway re-timing output every 100 ms
		{
			"stall",
			mockllm.FaultConfig{StallRate: 1, StallDuration: 300 * time.Millisecond},
			false,
			analysis.AnomalyStall,
		},
		{"multi-token", mockllm.FaultConfig{TokensPerEvent: 4}, false, analysis.AnomalyMultiToken},
		{"cut", mockllm.FaultConfig{StreamCutRate: 1, StreamCutAfter: 5}, false, analysis.AnomalyStreamCut},
		{"early first byte", mockllm.FaultConfig{EarlyFirstByte: true}, true, analysis.AnomalyLateFirstToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if raceEnabled && c.want == analysis.AnomalyPacing {
				// Pacing is judged by a spread of a few percent in the gaps;
				// under the race detector the client's own delays exceed it.
				t.Skip("timing-precision check; run without -race")
			}
			p, err := engine.Preset("ideal")
			if err != nil {
				t.Fatal(err)
			}
			// TTFT long enough that an early first byte stands out; jitter so
			// a clean stream is not itself "fixed-interval".
			p.TTFT, p.ITL = 150*time.Millisecond, 8*time.Millisecond
			p.Jitter = engine.Jitter{Dist: engine.JitterNormal, CV: 0.2}
			m, err := mockllm.New(
				mockllm.WithProfile(p),
				mockllm.WithModel("m"),
				mockllm.WithSeed(1),
				mockllm.WithFaults(c.faults),
			)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(m)
			t.Cleanup(func() { srv.Close(); m.Close() })
			in, _ := harness.ParseDist("fixed:16")
			out, _ := harness.ParseDist("fixed:64")
			plan := harness.Plan{Seed: 1, IgnoreEOS: true,
				Targets: []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
				Dataset: harness.Dataset{InputTokens: in, OutputTokens: out},
				Load:    harness.Load{Concurrency: []int{4}, Requests: 12}}
			dir := t.TempDir()
			res, err := harness.Run(context.Background(), plan, dir)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := results.ReadRecords(dir + "/" + results.RecordsFile)
			if err != nil {
				t.Fatal(err)
			}
			a := analysis.Analyze(res.Summary.Steps, recs, analysis.Options{})
			if testing.Verbose() {
				var g []float64
				for _, r := range recs {
					for _, x := range r.ChunkGapsNS {
						g = append(g, float64(x)/1e6)
					}
				}
				sort.Float64s(g)
				if len(g) > 0 {
					t.Logf(
						"gaps: n=%d p5=%.2f p25=%.2f p50=%.2f p75=%.2f p95=%.2f",
						len(g),
						g[len(g)*5/100],
						g[len(g)/4],
						g[len(g)/2],
						g[len(g)*3/4],
						g[len(g)*95/100],
					)
				}
			}
			kinds := map[string]int{}
			for _, an := range a.Anomalies {
				kinds[an.Kind] = an.Affected
			}
			if c.want == "" {
				// A loaded test machine can deschedule the client or the mock
				// for tens of milliseconds: a real pause in the stream as the
				// client saw it, but not the server's doing. Every other kind
				// must stay silent on a clean stream.
				delete(kinds, analysis.AnomalyStall)
			}
			switch {
			case c.want == "" && len(kinds) > 0:
				t.Errorf("clean stream reported %v: %+v", kinds, a.Anomalies)
			case c.want != "" && kinds[c.want] == 0:
				t.Errorf("want %s, got %+v", c.want, a.Anomalies)
			}
		})
	}
}
