package clientmon_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// A real run against the real mock, watched by the monitor: the verdict
// lands in summary.json as client_bound with its reason.
func TestVerdictInSummary(t *testing.T) {
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT, p.ITL = 10*time.Millisecond, 5*time.Millisecond
	m, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	defer func() { srv.Close(); m.Close() }()

	cases := []struct {
		name      string
		opts      []clientmon.Option
		wantBound bool
		wantWhy   string
	}{
		// A CPU threshold of 0.1 % of one core: any real step breaks it, so
		// the step is client-bound on purpose.
		{
			"tiny CPU threshold",
			[]clientmon.Option{
				clientmon.WithCores(1),
				clientmon.WithCPUThreshold(0.001),
				clientmon.WithMaxSchedLatency(0),
				clientmon.WithMaxScheduleLag(time.Hour),
				clientmon.WithMaxClientDelay(time.Hour),
			},
			true,
			"client CPU",
		},
		// Default CPU threshold: ten slow streams are far below 85 % of the
		// cores. The lag, scheduler and client-delay rules are off because a
		// busy shared machine may break them on its own.
		{
			"default CPU threshold",
			[]clientmon.Option{
				clientmon.WithMaxSchedLatency(0),
				clientmon.WithMaxScheduleLag(time.Hour),
				clientmon.WithMaxClientDelay(time.Hour),
			},
			false,
			"",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var warn strings.Builder
			mon, err := clientmon.New(append([]clientmon.Option{clientmon.WithFile(filepath.Join(dir, results.ClientFile)),
				clientmon.WithInterval(100 * time.Millisecond), clientmon.WithWarnings(&warn)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			plan := harness.Plan{
				Seed:    1,
				Targets: []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
				Dataset: harness.Dataset{
					InputTokens:  harness.Dist{Kind: "fixed", A: 16},
					OutputTokens: harness.Dist{Kind: "fixed", A: 16},
				},
				Load: harness.Load{Concurrency: []int{10}, Requests: 30},
			}
			res, err := harness.Run(context.Background(), plan, dir, harness.WithClientMonitor(mon))
			if err != nil {
				t.Fatal(err)
			}
			if err := mon.Stop(); err != nil {
				t.Fatal(err)
			}
			var sum results.Summary
			b, err := os.ReadFile(filepath.Join(dir, results.SummaryFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &sum); err != nil {
				t.Fatal(err)
			}
			if len(sum.Steps) != 1 || len(res.Summary.Steps) != 1 {
				t.Fatalf("%d steps in summary.json", len(sum.Steps))
			}
			s := sum.Steps[0]
			if s.ClientBound != tc.wantBound || !strings.Contains(s.ClientBoundReason, tc.wantWhy) {
				t.Fatalf(
					"client_bound %v reason %q; want %v with %q",
					s.ClientBound,
					s.ClientBoundReason,
					tc.wantBound,
					tc.wantWhy,
				)
			}
			if tc.wantBound && !strings.Contains(warn.String(), "client-bound") {
				t.Errorf("no terminal warning, got %q", warn.String())
			}
			v := mon.Verdicts()
			if len(v) != 1 || v[0].Step != "0 mock c=10" || v[0].PeakSockets < 1 {
				t.Errorf("verdicts %+v: want one for the step, with the client's sockets counted", v)
			}
		})
	}
}
