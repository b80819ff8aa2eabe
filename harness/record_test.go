package harness

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	// 10 streamed requests with known timings: TTFT = 100 ms + i µs,
	// 5 tokens 10 ms apart (one chunk carrying 2 tokens), one 500 and one warm-up.
	var recs []results.Record
	for i := range 10 {
		sent := int64(i) * 1e9
		ft := sent + 100e6 + int64(i)*1e3
		recs = append(recs, results.Record{
			ID: "x", Target: "m", Step: 3, Scenario: "concurrency", Concurrency: 2, Stream: true,
			IntendedNS: sent - 1e5, SentNS: sent, FirstTokenNS: ft, LastTokenNS: ft + 40e6, DoneNS: ft + 41e6,
			ChunkGapsNS: []int64{10e6, 10e6, 20e6}, ChunkTokens: []int32{1, 1, 1, 2}, NIn: 10, NOut: 5, NOutCounted: 5,
		})
	}
	recs = append(
		recs,
		results.Record{
			Step:       3,
			Target:     "m",
			Stream:     true,
			IntendedNS: 2e9,
			SentNS:     2e9,
			DoneNS:     2e9 + 5,
			ErrorClass: results.ErrServer,
			Status:     500,
		},
		results.Record{
			Step:         3,
			Target:       "m",
			Stream:       true,
			Warmup:       true,
			IntendedNS:   0,
			SentNS:       1,
			FirstTokenNS: 300e6,
			LastTokenNS:  400e6,
			DoneNS:       400e6,
			NOut:         5,
		},
	)
	s := Summarize(recs, WithSLO(SLO{TTFT: Duration(100_005_000)}))
	if len(s.Steps) != 1 {
		t.Fatalf("%d steps", len(s.Steps))
	}
	st := s.Steps[0]
	if st.Requests != 11 || st.OK != 10 || st.Warmup != 1 || st.Errors[results.ErrServer] != 1 {
		t.Errorf("counts: %+v", st)
	}
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %v, want %v ± %v", name, got, want, tol)
		}
	}
	near("ttft mean", st.TTFT.Mean, 100.0045, 1e-9)
	near("ttft min", st.TTFT.Min, 100, 1e-9)
	near("ttft max", st.TTFT.Max, 100.009, 1e-9)
	near("ttft p50", st.TTFT.P50, 100.004, 0.008) // HDR bucket at 100 ms is 8 µs
	near("ttft from schedule p50", st.TTFTFromSchedule.P50, 100.104, 0.008)
	near("lag p99", st.ScheduleLag.P99, 0.1, 0.001)
	// Token-weighted ITL: per request gaps 10, 10, and 10+10 from the 2-token chunk.
	near("itl p50", st.ITL.P50, 10, 0.001)
	near("itl max", st.ITL.Max, 10, 1e-9)
	if st.ITL.Count != 40 || st.ChunkITL.Count != 30 {
		t.Errorf("ITL count %d (want 40 token-weighted), chunk ITL count %d (want 30)", st.ITL.Count, st.ChunkITL.Count)
	}
	near("chunk itl max", st.ChunkITL.Max, 20, 1e-9)
	near("tpot", st.TPOT.Mean, 10, 1e-9) // 40 ms / (5-1)
	near("e2e", st.E2E.Mean, 140.0045, 1e-9)
	// Window: first intended (-0.1 ms) to last done (9 s + 141.009 ms).
	wantWindow := (9e9 + 141.009e6 + 1e5) / 1e9
	near("window", st.WindowS, wantWindow, 1e-9)
	near("req/s", st.RequestsPerS, 10/wantWindow, 1e-9)
	near("out tok/s", st.OutputTokensPerS, 50/wantWindow, 1e-9)
	near("in tok/s", st.InputTokensPerS, 100/wantWindow, 1e-9)
	// SLO TTFT ≤ 100.005 ms: requests 0..5 meet it.
	near("goodput", st.GoodputRequestsPerS, 6/wantWindow, 1e-9)
	if st.WarmupSummary == nil || st.WarmupSummary.TTFT.Count != 1 {
		t.Errorf("warm-up not summarized apart: %+v", st.WarmupSummary)
	}
	joined := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"only 10 samples", "1 of 11 requests failed"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings %q lack %q", joined, want)
		}
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TTFT p50", "100.0", "server_error:1", "warm-up 1/1 ok"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
}

func BenchmarkParseChunk(b *testing.B) {
	data := []byte(
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`,
	)
	b.ReportAllocs()
	for b.Loop() {
		if !parseChunk(APIChat, data).text {
			b.Fatal("no text")
		}
	}
}

// Summaries prefer kernel stamps: TTFT, ITL and E2E come from them, the
// step names its clock, reports the client's delay and warns about chunks
// stamped late by a shared read.
func TestSummarizeKernelStamps(t *testing.T) {
	t.Parallel()
	// User-space: TTFT 105 ms, gaps 10 ms; kernel: TTFT 100 ms, gaps 10, 10
	// (the client read every chunk 5 ms late, the first 5 ms, the last 5 ms).
	stamped := func(coalesced int) results.Record {
		return results.Record{Step: 1, Target: "m", Stream: true, SentNS: 1, FirstTokenNS: 105e6 + 1,
			LastTokenNS: 125e6 + 1, DoneNS: 126e6, ChunkGapsNS: []int64{10e6, 10e6}, NOut: 3,
			FirstTokenKernelNS: 100e6 + 1, LastTokenKernelNS: 120e6 + 1, ChunkDelaysNS: []int64{5e6, 5e6, 5e6},
			ChunksCoalesced: coalesced, CoalescedBoundNS: int64(coalesced) * 3e6}
	}
	user := stamped(0)
	user.FirstTokenKernelNS = 0
	user.LastTokenKernelNS = 0
	user.ChunkDelaysNS = nil
	for _, tc := range []struct {
		name      string
		recs      []results.Record
		clock     string
		ttftMax   float64
		delays    int64
		coalesced int64
		warn      string
	}{
		// Every request kernel-stamped: the kernel's TTFT, five delays of 5 ms.
		{"kernel", []results.Record{stamped(0), stamped(0)}, "kernel", 100, 6, 0, ""},
		// One chunk shared a read: counted, bounded, warned about.
		{"coalesced", []results.Record{stamped(1)}, "kernel", 100, 3, 1, "late by at most 3.000 ms"},
		// A user-stamped request beside a kernel-stamped one: mixed, and warned.
		{"mixed", []results.Record{stamped(0), user}, "mixed", 105, 3, 0, "1 of 2 timed requests had kernel"},
		// None stamped: the user-space clock throughout.
		{"user", []results.Record{user}, "user", 105, 0, 0, ""},
	} {
		st := Summarize(tc.recs).Steps[0]
		if st.Clock != tc.clock || math.Abs(st.TTFT.Max-tc.ttftMax) > 1e-6 || st.ClientDelay.Count != tc.delays ||
			st.ChunksCoalesced != tc.coalesced {
			t.Errorf("%s: clock %q, TTFT max %v, %d delays, %d coalesced", tc.name, st.Clock, st.TTFT.Max,
				st.ClientDelay.Count, st.ChunksCoalesced)
		}
		if tc.delays > 0 && math.Abs(st.ClientDelay.Max-5) > 1e-6 {
			t.Errorf("%s: client delay %+v, want 5 ms", tc.name, st.ClientDelay)
		}
		if tc.clock == "kernel" && math.Abs(st.ChunkITL.Max-10) > 1e-6 {
			t.Errorf("%s: chunk ITL max %v, want the kernel's 10 ms", tc.name, st.ChunkITL.Max)
		}
		if tc.warn != "" && !strings.Contains(strings.Join(st.Warnings, "\n"), tc.warn) {
			t.Errorf("%s: warnings %q lack %q", tc.name, st.Warnings, tc.warn)
		}
	}
}

// BenchmarkParseChunkRoleOnly is the chunk that carries no token (vLLM's
// first, role-only chunk): once per request, it is validated as JSON in full.
func BenchmarkParseChunkRoleOnly(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",` +
		`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if c := parseChunk(APIChat, data); c.text || c.invalid {
			b.Fatal("misread")
		}
	}
}
