package ceiling

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// smallConfig is a calibration of a few tiny levels. Limits are out of
// reach (a busy test machine decides nothing here); the tests check what
// is measured and how, not this machine's ceiling.
func smallConfig(t *testing.T) Config {
	return Config{
		TTFT: 10 * time.Millisecond, ITL: 5 * time.Millisecond,
		InputTokens: 16, OutputTokens: 8,
		Concurrency: []int{1, 5}, Rates: []float64{20},
		StepDuration: 400 * time.Millisecond,
		MaxError:     time.Hour, MaxLag: time.Hour, CPUShare: 1, MaxFailures: 0.5,
		OutDir: t.TempDir(),
		// A test binary is not testbed: it cannot be the child mock
		// (cmd/testbed's tests run that one).
		InProcess: true,
	}
}

// checkLevels asserts what must hold at every level whatever the machine:
// every measured request was matched with the mock's truth, and no client
// TTFT was shorter than the server's (the client cannot see a token before
// the server writes it).
func checkLevels(t *testing.T, rep *Report, want int) {
	t.Helper()
	if len(rep.Levels) != want {
		t.Fatalf("%d levels, want %d", len(rep.Levels), want)
	}
	for _, lv := range rep.Levels {
		if lv.Requests == 0 || lv.Unmatched != 0 || lv.Failed != 0 {
			t.Errorf(
				"c=%d r=%g: %d compared, %d unmatched, %d failed",
				lv.Concurrency,
				lv.Rate,
				lv.Requests,
				lv.Unmatched,
				lv.Failed,
			)
		}
		if lv.ImpossibleTT != 0 || lv.TTFTErrorMS.P50 < 0 {
			t.Errorf(
				"c=%d r=%g: %d client TTFTs below the server's (TTFT error p50 %v)",
				lv.Concurrency,
				lv.Rate,
				lv.ImpossibleTT,
				lv.TTFTErrorMS.P50,
			)
		}
		q := lv.ErrorMS
		if !(q.P50 <= q.P99 && q.P99 <= q.Max) || lv.TokensPerS <= 0 || lv.RequestsPerS <= 0 {
			t.Errorf(
				"c=%d r=%g: error %+v, %v tok/s, %v req/s",
				lv.Concurrency,
				lv.Rate,
				q,
				lv.TokensPerS,
				lv.RequestsPerS,
			)
		}
		if lv.OverLimit {
			t.Errorf("c=%d r=%g over limits out of reach: %s", lv.Concurrency, lv.Rate, lv.Reason)
		}
	}
}

// Against the in-process mock: every level's records are compared with the
// mock's truth and calibration.json carries the fields.
func TestCalibrateInProcess(t *testing.T) {
	cfg := smallConfig(t)
	rep, err := Find(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkLevels(t, rep, 3)
	if rep.Ceiling.Concurrency != 5 || rep.Ceiling.RequestsPerS <= 0 ||
		!strings.Contains(rep.Ceiling.Reason, "above the largest") {
		t.Errorf("ceiling %+v, want 5 streams with no level over a limit", rep.Ceiling)
	}
	if !strings.Contains(rep.Sentence, "can drive up to 5 streams") || !strings.Contains(rep.Mock, "in-process") {
		t.Errorf("sentence %q, mock %q", rep.Sentence, rep.Mock)
	}

	// calibration.json: the shape, field by field.
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, "calibration.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	levels, _ := doc["levels"].([]any)
	if len(levels) != 3 {
		t.Fatalf("calibration.json has %d levels", len(levels))
	}
	l0 := levels[0].(map[string]any)
	for _, k := range []string{"concurrency", "rate", "requests", "error_ms", "schedule_lag_ms", "client_cpu_percent", "tokens_per_s", "requests_per_s"} {
		if _, ok := l0[k]; !ok {
			t.Errorf("level lacks %q", k)
		}
	}
	for k, sub := range map[string][]string{"error_ms": {"p50", "p99", "max"}, "schedule_lag_ms": {"p50", "p99"}} {
		m, _ := l0[k].(map[string]any)
		for _, s := range sub {
			if _, ok := m[s]; !ok {
				t.Errorf("%s lacks %q", k, s)
			}
		}
	}
	ceil, _ := doc["ceiling"].(map[string]any)
	for _, k := range []string{"concurrency", "requests_per_s", "tokens_per_s", "reason"} {
		if _, ok := ceil[k]; !ok {
			t.Errorf("ceiling lacks %q", k)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.OutDir, results.ClientFile)); err != nil {
		t.Errorf("client samples: %v", err)
	}
}

// Against a mock in another server (here httptest, over /v1): the truth
// comes from GET /testbed/requests.
func TestCalibrateRemote(t *testing.T) {
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT, p.ITL = 10*time.Millisecond, 5*time.Millisecond
	m, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithSeed(2))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	defer func() { srv.Close(); m.Close() }()
	cfg := smallConfig(t)
	cfg.URL = srv.URL + "/v1"
	cfg.Concurrency, cfg.Rates = []int{3}, []float64{}
	rep, err := Find(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkLevels(t, rep, 1)
	if !strings.Contains(rep.Mock, "another process") {
		t.Errorf("mock %q", rep.Mock)
	}
}

// A level over a limit stops its ladder and sets the ceiling below it.
func TestJudgeAndCeiling(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	ok := func(c int, r, rps float64) Level {
		return Level{
			Concurrency:      c,
			Rate:             r,
			Requests:         100,
			ErrorMS:          Quantiles{0.1, 0.5, 0.9},
			ClientCPUPercent: 30,
			RequestsPerS:     rps,
			TokensPerS:       32 * rps,
		}
	}
	cases := []struct {
		name     string
		level    Level
		wantOver string // "" when within limits
	}{
		// Every figure under its limit.
		{"fine", ok(10, 0, 15), ""},
		// Error p99 just over 1 ms.
		{
			"error",
			func() Level { l := ok(100, 0, 150); l.ErrorMS.P99 = 1.2; return l }(),
			"measurement error p99 1.200 ms > 1 ms",
		},
		// Schedule lag p99 over 1 ms.
		{
			"lag",
			func() Level { l := ok(0, 500, 500); l.ScheduleLagMS.P99 = 3; return l }(),
			"schedule lag p99 3.000 ms",
		},
		// CPU exactly at 85 % counts as saturated.
		{
			"cpu",
			func() Level { l := ok(1000, 0, 1400); l.ClientCPUPercent = 85; l.ClientCores = 2; return l }(),
			"client CPU 85% of 2 cores",
		},
		// Failures above 1 % of requests.
		{"failures", func() Level { l := ok(2000, 0, 0); l.Failed = 5; return l }(), "5 of 105 requests failed"},
		// Nothing to compare.
		{"empty", Level{Concurrency: 4000}, "no request could be compared"},
	}
	var levels []Level
	for _, tc := range cases {
		lv := tc.level
		judge(cfg, &lv)
		if (tc.wantOver == "") == lv.OverLimit || !strings.Contains(lv.Reason, tc.wantOver) {
			t.Errorf("%s: over %v reason %q, want %q", tc.name, lv.OverLimit, lv.Reason, tc.wantOver)
		}
		levels = append(levels, lv)
	}
	// The ladder as run: c=10 fine, c=100 over; r=500 over. Levels after a
	// break (c=1000, c=2000, c=4000) do not raise the ceiling.
	c := ceiling(cfg, levels)
	if c.Concurrency != 10 || c.RequestsPerS != 15 || c.TokensPerS != 480 {
		t.Errorf("ceiling %+v, want 10 streams, 15 req/s, 480 tok/s", c)
	}
	if !strings.Contains(c.Reason, "at 100 streams: measurement error") ||
		!strings.Contains(c.Reason, "at 500 req/s: schedule lag") {
		t.Errorf("ceiling reason %q", c.Reason)
	}
}

// fixedTruth is a truth source over a map, for compare's arithmetic.
type fixedTruth map[string]mockllm.Truth

func (fixedTruth) refresh(context.Context) error         { return nil }
func (f fixedTruth) get(id string) (mockllm.Truth, bool) { t, ok := f[id]; return t, ok }

// compare's arithmetic on hand-made records: the error is client minus
// server, per measurement.
func TestCompare(t *testing.T) {
	t.Parallel()
	truth := fixedTruth{
		// Server: arrival 1000, tokens at 11000, 16000, 21000 ns.
		"a": {
			ID:           "a",
			ArrivalNS:    1_000,
			FirstTokenNS: 11_000,
			LastTokenNS:  21_000,
			TokenNS:      []int64{11_000, 16_000, 21_000},
		},
		"b": {ID: "b", ArrivalNS: 0, FirstTokenNS: 10_000, LastTokenNS: 10_000, TokenNS: []int64{10_000}},
	}
	recs := []results.Record{
		// Client: TTFT 10600 ns against the server's 10000 (+0.6 µs), E2E
		// +0.8 µs, gaps 5000 and 5200 against 5000 and 5000.
		{
			ID:           "a",
			Stream:       true,
			SentNS:       1_000,
			FirstTokenNS: 11_600,
			LastTokenNS:  21_800,
			ChunkGapsNS:  []int64{5_000, 5_200},
		},
		// Chunk count differs from the server's: unmatched.
		{ID: "b", Stream: true, SentNS: 1, FirstTokenNS: 20_000, LastTokenNS: 25_000, ChunkGapsNS: []int64{5_000}},
		// No truth at all: unmatched.
		{ID: "c", Stream: true, SentNS: 1, FirstTokenNS: 20_000, LastTokenNS: 20_000},
		// Failed: counted apart.
		{ID: "d", Stream: true, SentNS: 1, ErrorClass: results.ErrServer},
		// Warm-up: ignored.
		{ID: "a", Warmup: true, Stream: true, SentNS: 1, FirstTokenNS: 2, LastTokenNS: 3},
	}
	var lv Level
	sched := schedule{ttft: 10 * time.Microsecond, itl: 5 * time.Microsecond}
	compare(&lv, recs, truth, sched)
	if lv.Requests != 1 || lv.Unmatched != 2 || lv.Failed != 1 || lv.ImpossibleTT != 0 {
		t.Fatalf("counts %+v", lv)
	}
	if lv.TTFTErrorMS.P50 != 0.001 || lv.E2EErrorMS.P50 != 0.001 || lv.ITLErrorMS.Max != 0 {
		// 600 ns and 800 ns round to 0.001 ms; the 200 ns gap error to 0.
		t.Errorf("errors ttft %+v e2e %+v itl %+v", lv.TTFTErrorMS, lv.E2EErrorMS, lv.ITLErrorMS)
	}
	// A client TTFT below the server's is flagged as impossible.
	recs[0].FirstTokenNS = 5_000
	lv = Level{}
	compare(&lv, recs[:1], truth, sched)
	if lv.ImpossibleTT != 1 {
		t.Errorf("client TTFT below server's not flagged: %+v", lv)
	}
}

// Ctrl-C during a level: the levels finished before it are still written,
// marked interrupted, and the error says so.
func TestCalibrateInterrupted(t *testing.T) {
	cfg := smallConfig(t)
	cfg.Concurrency, cfg.Rates = []int{1, 2}, []float64{}
	cfg.StepDuration = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var log lockedLog
	cfg.Log = &log
	go func() {
		// Cancel once the first level has been reported.
		for !strings.Contains(log.String(), "c=1 ") {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	rep, err := Find(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want interrupted", err)
	}
	if rep == nil || !rep.Interrupted || len(rep.Levels) != 1 || rep.Levels[0].Concurrency != 1 {
		t.Fatalf("report %+v, want the first level only, marked interrupted", rep)
	}
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, "calibration.json"))
	if err != nil || !strings.Contains(string(b), `"interrupted": true`) {
		t.Errorf("calibration.json: %v\n%s", err, b)
	}
}

// lockedLog is a log writer safe for the calibration and the test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// compare with kernel stamps: the error comes from them, the user-space
// error stands beside it, and the mock's lateness is apart from both.
func TestCompareKernelStamps(t *testing.T) {
	t.Parallel()
	sched := schedule{ttft: 10 * time.Microsecond, itl: 5 * time.Microsecond}
	// Server: tokens due at 10, 15, 20 µs; the last written 1 µs late.
	truth := fixedTruth{"k": {
		ID: "k", TokenNS: []int64{10_000, 15_000, 21_000}, FirstTokenNS: 10_000, LastTokenNS: 21_000,
	}}
	for _, tc := range []struct {
		name                  string
		delays                []int64
		clock                 string
		errP99, userP99, late float64
	}{
		// The client read every chunk 3 ms after the kernel had it: the
		// kernel-stamped error is nil, the user-space one 3 ms at E2E and TTFT.
		{"stamped", []int64{3_000_000, 3_000_000, 3_000_000}, "kernel", 0, 3, 0.001},
		// No stamps: both errors are the user-space one.
		{"unstamped", nil, "user", 3, 3, 0.001},
	} {
		rec := results.Record{ID: "k", Stream: true, WroteNS: 2_000, FirstTokenNS: 3_010_000, LastTokenNS: 3_021_000,
			ChunkGapsNS: []int64{5_000, 6_000}, ChunkDelaysNS: tc.delays}
		if tc.delays != nil {
			rec.FirstTokenKernelNS, rec.LastTokenKernelNS = 10_000, 21_000
		}
		var lv Level
		compare(&lv, []results.Record{rec}, truth, sched)
		if lv.Clock != tc.clock || lv.ErrorMS.P99 != tc.errP99 || lv.ErrorUserMS.P99 != tc.userP99 ||
			lv.ServerLatenessMS.Max != tc.late || lv.SendDelayMS.Max != 0.002 {
			t.Errorf("%s: clock %q, error %+v, user error %+v, lateness %+v, send delay %+v", tc.name, lv.Clock,
				lv.ErrorMS, lv.ErrorUserMS, lv.ServerLatenessMS, lv.SendDelayMS)
		}
	}
}
