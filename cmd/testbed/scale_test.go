package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/history"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// cliProc runs the CLI as a separate process: the test binary acting as the
// testbed command (TestMain), so shards are real processes without a build.
func cliProc(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCLI+"=1")
	return cmd
}

// kneeMock serves the engine-mode mock: continuous batching with slots
// batch slots and 6 ms decode steps, so throughput stops growing at
// concurrency slots.
func kneeMock(t *testing.T, slots int) *httptest.Server {
	t.Helper()
	prof, err := engine.ParseProfile([]byte(fmt.Sprintf(`
name: scale-knee
mode: engine
beta0_us: 6000
beta1_us: 2
beta2_us: 10
max_num_seqs: %d
max_num_batched_tokens: 8192
block_size: 16
kv_cache_blocks: 100000
max_model_len: 4096
`, slots)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	return srv
}

// TestScaleOutEqualsOneProcess runs one plan as one process and as four
// shard processes started together by a coordinator, merges the shards,
// and checks that the merged run is the single run: the same requests
// (counts, tokens, request mix), latencies within the timing noise of two
// runs on one machine, the same throughput knee; and that the merge is
// exact: summary.json, built from the merged histograms, equals the
// summary rebuilt from the merged records. It compares timings, and its
// five processes would load the machine under this package's other timing
// tests, so it runs in make test's pass without -race, one package at a time.
func TestScaleOutEqualsOneProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() || raceEnabled {
		t.Skip("times five processes against the mock: runs without -race (make test's timing pass)")
	}
	const slots = 8
	srv := kneeMock(t, slots)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	writeFile(t, plan, fmt.Sprintf(`
name: scale
seed: 7
targets:
  - {name: mock, url: %q, model: m}
dataset: {input_tokens: "uniform:16,48", output_tokens: "uniform:12,20"}
load: {concurrency: [4, 16, 24, 32], requests: 48, warmup: 4}
ignore_eos: true
`, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	single := filepath.Join(dir, "single")
	if out, err := cliProc(ctx, "run", plan, "-o", single).CombinedOutput(); err != nil {
		t.Fatalf("single run: %v\n%s", err, out)
	}
	merged, flagged := runShards(ctx, t, plan, dir, 4)

	if flagged != "" {
		t.Errorf("merge flagged steps:\n%s", flagged)
	}
	one := loadSummary(t, single)
	all := loadSummary(t, merged)
	sameRequests(t, single, merged)
	if len(one.Steps) != len(all.Steps) {
		t.Fatalf("%d steps merged, %d in the single run", len(all.Steps), len(one.Steps))
	}
	for i := range one.Steps {
		compareStep(t, slots, &one.Steps[i], &all.Steps[i])
	}
	exactMerge(t, merged, all)
	sameKnee(t, single, merged)
}

// runShards runs n shard processes and the coordinator, then merges; it
// returns the merged directory and the steps merge flagged.
func runShards(ctx context.Context, t *testing.T, plan, dir string, n int) (string, string) {
	t.Helper()
	coord, err := harness.NewCoordinator(n, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	cs := httptest.NewServer(coord)
	defer cs.Close()
	var wg sync.WaitGroup
	outs := make([][]byte, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			outs[i], errs[i] = cliProc(ctx, "run", plan, "--shard", fmt.Sprintf("%d/%d", i, n),
				"--coordinator", cs.URL, "-o", filepath.Join(dir, "shard-{shard}")).CombinedOutput()
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("shard %d: %v\n%s", i, errs[i], outs[i])
		}
		if want := fmt.Sprintf("shard %d/%d: clock offset", i, n); !bytes.Contains(outs[i], []byte(want)) {
			t.Errorf("shard %d's output does not say %q:\n%s", i, want, outs[i])
		}
	}
	merged := filepath.Join(dir, "merged")
	var stdout, stderr bytes.Buffer
	store := filepath.Join(dir, "history.db")
	args := []string{"merge", "-o", merged, "--store", store, filepath.Join(dir, "shard-*")}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("merge: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "shard starts spread at most") {
		t.Errorf("merge output does not give the skew:\n%s", stdout.String())
	}
	var info results.RunInfo[harness.Plan]
	if err := results.ReadJSON(filepath.Join(merged, results.RunFile), &info); err != nil {
		t.Fatal(err)
	}
	checkStored(ctx, t, store, &info)
	for _, sh := range info.Shards {
		late := make([]string, len(sh.Steps))
		for i, s := range sh.Steps {
			late[i] = fmt.Sprintf("%.2f", float64(s.LateNS)/1e6)
		}
		t.Logf("shard %d: clock offset %.3f ms (rtt %.3f ms), late per step %s ms", sh.Index,
			float64(sh.ClockOffsetNS)/1e6, float64(sh.ClockRTTNS)/1e6, strings.Join(late, " "))
	}
	for _, ms := range info.Merge.Steps {
		t.Logf("step %d: starts %.3f ms apart", ms.Step, float64(ms.StartSpreadNS)/1e6)
	}
	return merged, stderr.String()
}

// checkStored: the merged run is in the results store, every step of it.
func checkStored(ctx context.Context, t *testing.T, loc string, info *results.RunInfo[harness.Plan]) {
	t.Helper()
	s, err := history.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Get(ctx, info.RunID)
	if err != nil {
		t.Fatalf("merged run %s not in the store: %v", info.RunID, err)
	}
	if len(r.Steps) != len(info.Plan.Steps()) || r.Records != info.Records {
		t.Errorf("stored run: %d steps, %d records; merged %d steps, %d records",
			len(r.Steps), r.Records, len(info.Plan.Steps()), info.Records)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadSummary(t *testing.T, dir string) results.Summary {
	t.Helper()
	var s results.Summary
	if err := results.ReadJSON(filepath.Join(dir, results.SummaryFile), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// requestKey is what makes a request the same request in both runs.
type requestKey struct {
	step, nIn, maxTokens int
	warmup               bool
}

// sameRequests: both runs sent the same multiset of requests per step,
// with unique ids.
func sameRequests(t *testing.T, a, b string) {
	t.Helper()
	count := func(dir string) map[requestKey]int {
		recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
		if err != nil {
			t.Fatal(err)
		}
		m := map[requestKey]int{}
		ids := map[string]bool{}
		for _, r := range recs {
			if ids[r.ID] {
				t.Errorf("%s: id %s twice", dir, r.ID)
			}
			ids[r.ID] = true
			m[requestKey{r.Step, r.NInPlanned, r.MaxTokens, r.Warmup}]++
		}
		return m
	}
	ca := count(a)
	cb := count(b)
	if len(ca) != len(cb) {
		t.Errorf("%d distinct requests in the single run, %d merged", len(ca), len(cb))
	}
	for k, n := range ca {
		if cb[k] != n {
			t.Errorf("request %+v: %d in the single run, %d merged", k, n, cb[k])
		}
	}
}

// compareStep: identical counts and tokens; ITL, and TTFT while nothing
// queues (concurrency ≤ slots), within the noise of timing two runs on a
// shared machine: the mock's decode step is 6 ms and a request's place in
// the batch moves its TTFT by whole steps, so the tolerance is two steps
// plus 20 %. Past the slots TTFT is the wait in the queue, which in a step
// of 48 requests hangs on the order of the first arrivals (connections
// dialled, prompts built): two single runs differ by a batch round there
// too. Saturated throughput is compared instead, within 15 %.
func compareStep(t *testing.T, slots int, one, all *results.StepSummary) {
	t.Helper()
	if one.Requests != all.Requests || one.OK != all.OK || one.Warmup != all.Warmup ||
		one.InputTokens != all.InputTokens || one.OutputTokens != all.OutputTokens {
		t.Errorf("step %d: requests/ok/warmup/in/out %d/%d/%d/%d/%d single, %d/%d/%d/%d/%d merged", one.Step,
			one.Requests, one.OK, one.Warmup, one.InputTokens, one.OutputTokens,
			all.Requests, all.OK, all.Warmup, all.InputTokens, all.OutputTokens)
	}
	const stepMS = 6.0
	near := func(name string, a, b float64) {
		if tol := 2*stepMS + 0.2*a; math.Abs(a-b) > tol {
			t.Errorf("step %d %s: %.2f ms single, %.2f ms merged (tolerance %.2f ms)", one.Step, name, a, b, tol)
		}
	}
	if one.Concurrency <= slots {
		near("ttft p50", one.TTFT.P50, all.TTFT.P50)
		near("ttft mean", one.TTFT.Mean, all.TTFT.Mean)
	}
	if one.Concurrency >= 2*slots && math.Abs(one.OutputTokensPerS-all.OutputTokensPerS) > 0.15*one.OutputTokensPerS {
		t.Errorf("step %d: %.0f tokens/s single, %.0f merged", one.Step, one.OutputTokensPerS, all.OutputTokensPerS)
	}
	near("itl p50", one.ITL.P50, all.ITL.P50)
	near("itl p90", one.ITL.P90, all.ITL.P90)
	t.Logf("c=%d  ttft p50 %.2f / %.2f  p90 %.2f / %.2f  itl p50 %.2f / %.2f  tok/s %.0f / %.0f", one.Concurrency,
		one.TTFT.P50, all.TTFT.P50, one.TTFT.P90, all.TTFT.P90, one.ITL.P50, all.ITL.P50,
		one.OutputTokensPerS, all.OutputTokensPerS)
}

// exactMerge: the merged summary.json (from the shards' histograms) has
// the percentiles and counts of the summary rebuilt from the merged
// records, bucket for bucket.
func exactMerge(t *testing.T, dir string, saved results.Summary) {
	t.Helper()
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := harness.Summarize(recs)
	for i := range rebuilt.Steps {
		a := &saved.Steps[i]
		b := &rebuilt.Steps[i]
		if a.Requests != b.Requests || a.OK != b.OK || a.OutputTokens != b.OutputTokens || a.WindowS != b.WindowS {
			t.Errorf("step %d: merged summary %d/%d/%d/%gs, rebuilt from records %d/%d/%d/%gs", a.Step,
				a.Requests, a.OK, a.OutputTokens, a.WindowS, b.Requests, b.OK, b.OutputTokens, b.WindowS)
		}
		for _, m := range [][2]results.Stats{{a.TTFT, b.TTFT}, {a.ITL, b.ITL}, {a.E2E, b.E2E}, {a.TPOT, b.TPOT}} {
			x := m[0]
			y := m[1]
			if x.Count != y.Count || x.P50 != y.P50 || x.P90 != y.P90 || x.P99 != y.P99 || x.Max != y.Max {
				t.Errorf("step %d: merged %+v, rebuilt %+v", a.Step, x, y)
			}
		}
	}
}

// sameKnee: the analysis of both runs finds the same throughput knee.
func sameKnee(t *testing.T, a, b string) {
	t.Helper()
	knee := func(dir string) string {
		var an analysis.Analysis
		if err := results.ReadJSON(filepath.Join(dir, results.AnalysisFile), &an); err != nil {
			t.Fatal(err)
		}
		for _, k := range an.Knees {
			if k.Ladder == analysis.LadderConcurrency && k.ThroughputKnee != nil {
				return fmt.Sprint(*k.ThroughputKnee)
			}
		}
		return "none"
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"report", a}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	ka := knee(a)
	kb := knee(b)
	t.Logf("throughput knee: %s single, %s merged", ka, kb)
	if ka != kb || ka == "none" {
		t.Errorf("throughput knee %s in the single run, %s merged", ka, kb)
	}
}
