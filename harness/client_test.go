package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
)

// TestStreamShapes checks the client against the mock's streaming
// anomalies: several tokens per event, and headers plus the role chunk
// flushed long before the first token.
func TestStreamShapes(t *testing.T) {
	t.Parallel()
	const ttft = 200 * time.Millisecond
	tests := []struct {
		name   string
		faults mockllm.FaultConfig
		check  func(t *testing.T, r results.Record)
	}{
		// Four tokens per event: 4 events for 16 tokens, each counted as 4,
		// and no discrepancy with the server's usage.
		{"multi-token events", mockllm.FaultConfig{TokensPerEvent: 4}, func(t *testing.T, r results.Record) {
			if r.NOutCounted != 16 || r.NOutDiff != 0 || len(r.ChunkGapsNS) != 3 || len(r.ChunkTokens) != 4 ||
				r.ChunkTokens[0] != 4 {
				t.Errorf(
					"counted %d (diff %d), %d gaps, chunk tokens %v; want 16, 0, 3, [4 4 4 4]",
					r.NOutCounted,
					r.NOutDiff,
					len(r.ChunkGapsNS),
					r.ChunkTokens,
				)
			}
		}},
		// The role chunk arrives at once, the first token after TTFT: TTFT
		// is timed on the token, not the first byte.
		{"early first byte", mockllm.FaultConfig{EarlyFirstByte: true}, func(t *testing.T, r results.Record) {
			fb, ft := r.FirstByteNS-r.SentNS, r.FirstTokenNS-r.SentNS
			if ft < int64(ttft) || fb > ft-int64(ttft/2) {
				t.Errorf(
					"first byte after %v, first token after %v; want the byte well before the %v token",
					time.Duration(fb),
					time.Duration(ft),
					ttft,
				)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv := fixedMock(t, ttft, 2*time.Millisecond, mockllm.WithFaults(tc.faults))
			p := basePlan(srv.URL)
			p.IgnoreEOS = true
			p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:16")
			p.Load = harness.Load{Concurrency: []int{2}, Requests: 4}
			_, recs := runRecords(t, p)
			for _, r := range recs {
				if !r.OK() {
					t.Fatalf("%s: %s %s", r.ID, r.ErrorClass, r.Error)
				}
				tc.check(t, r)
			}
		})
	}
}

// TestInFlightCap: an open-loop step faster than a cap of 2 can serve
// makes requests wait; the waits are recorded, counted in latency from
// schedule, and reported.
func TestInFlightCap(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, 50*time.Millisecond, time.Millisecond)
	p := basePlan(srv.URL)
	p.IgnoreEOS = true
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:2")
	// 100 req/s against a cap of 2 with ~51 ms requests: capacity ~40 req/s.
	p.Load = harness.Load{Rate: []float64{100}, Arrival: harness.ArrivalConstant, Requests: 20, MaxInFlight: 2}
	res, err := harness.Run(context.Background(), p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := res.Summary.Steps[0]
	if st.OK != 20 || st.CapWait.Count < 10 {
		t.Fatalf("ok %d, %d requests waited; want 20 ok and most of them waiting", st.OK, st.CapWait.Count)
	}
	if st.TTFTFromSchedule.P50 < st.TTFT.P50+st.CapWait.P50/2 {
		t.Errorf(
			"TTFT from schedule p50 %.1f ms does not include the cap wait (p50 %.1f ms; TTFT p50 %.1f ms)",
			st.TTFTFromSchedule.P50,
			st.CapWait.P50,
			st.TTFT.P50,
		)
	}
	if !strings.Contains(strings.Join(st.Warnings, "\n"), "waited for max_in_flight") {
		t.Errorf("no cap warning in %q", st.Warnings)
	}
}

// TestPromptFiles runs JSONL and ShareGPT prompt files through the mock:
// the prompts' lengths come back as the server's prompt tokens.
func TestPromptFiles(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, 5*time.Millisecond, time.Millisecond)
	dir := t.TempDir()
	files := map[string]string{
		"p.jsonl": `{"prompt": "one two three", "output_tokens": 3}` + "\n\n" + `{"text": "four five six", "max_tokens": 3}` + "\n",
		"p.json":  `[{"conversations":[{"from":"human","value":"one two three"},{"from":"gpt","value":"a b c"}]},{"conversations":[{"from":"system","value":"x"},{"from":"user","value":"x y z"},{"from":"gpt","value":"d e f"}]}]`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := basePlan(srv.URL)
			p.IgnoreEOS = true
			p.Dataset = harness.Dataset{Prompts: filepath.Join(dir, name)}
			p.Load = harness.Load{Concurrency: []int{1}, Requests: 4}
			_, recs := runRecords(t, p)
			for _, r := range recs {
				if !r.OK() || r.NInPlanned != 3 || r.MaxTokens != 3 || r.NOut != 3 {
					t.Errorf(
						"%s: ok %v planned in %d, max_tokens %d, n_out %d; want 3-token prompts and answers",
						r.ID,
						r.OK(),
						r.NInPlanned,
						r.MaxTokens,
						r.NOut,
					)
				}
			}
		})
	}
	if _, err := harness.LoadPrompts(filepath.Join(dir, "p.jsonl"), "sharegpt"); err == nil {
		t.Error("JSONL read as ShareGPT without error")
	}
}
