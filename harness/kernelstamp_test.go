package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
)

// TestKernelStampsBusyClient holds the client's process busy with
// CPU-bound goroutines while it streams from the mock in another process,
// and compares every inter-token gap with the mock's ground truth (the
// write time of each token chunk): user-space stamps drift by the time
// the reading goroutine waited for a thread, kernel stamps stay within
// 1 ms (p90; see below). Chunks that shared a read with the next (the reader fell behind
// by a whole gap) are left out of the kernel figure: their stamp is the
// later one's, which the records flag and bound.
//
// Not parallel: its spinning goroutines would slow the package's timing
// tests; Go runs it before the parallel ones start.
func TestKernelStampsBusyClient(t *testing.T) {
	// Gaps long enough that a reader delayed by a few scheduler slices
	// (10 ms each) mostly reads one event per read.
	const ttft, itl = 20 * time.Millisecond, 60 * time.Millisecond
	url := mockProcess(t, ttft, itl)
	stop := spin(t, runtime.GOMAXPROCS(0), 30*time.Second)
	p := basePlan(url)
	p.IgnoreEOS = true
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:8")
	zero := 0
	p.Extra = []harness.StepSpec{{Scenario: "concurrency", Concurrency: 4, Requests: 16, Warmup: &zero}}
	dir := t.TempDir()
	res, err := harness.Run(context.Background(), p, dir)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if res.Info.TokenStamps != "kernel" {
		t.Skipf("no kernel stamps on this system: %q %v", res.Info.TokenStamps, res.Info.TokenStampNotes)
	}
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	truth := fetchTruth(t, url)
	var userErr, kernelErr []float64
	var coalesced int
	for i := range recs {
		r := &recs[i]
		tr, ok := truth[r.ID]
		if !r.OK() || !ok || len(tr.TokenNS) != len(r.ChunkGapsNS)+1 || !r.KernelStamped() {
			t.Fatalf("request %s: ok %v, truth %v, %d truth tokens for %d chunks, kernel stamped %v",
				r.ID, r.OK(), ok, len(tr.TokenNS), len(r.ChunkGapsNS)+1, r.KernelStamped())
		}
		user := r.ChunkTimes()
		kern := r.KernelChunkTimes()
		exact := func(j int) bool { return j == len(kern)-1 || kern[j] != kern[j+1] }
		// A coalesced chunk is late by no more than the record's bound: its
		// lateness is read against the last chunk, always exact, which
		// lines the two clocks up.
		last := len(kern) - 1
		for j := range last {
			late := (kern[j] - kern[last]) - (tr.TokenNS[j] - tr.TokenNS[last])
			if !exact(j) && late > r.CoalescedBoundNS+int64(time.Millisecond) {
				t.Errorf("request %s chunk %d: stamped %v late, beyond the record's bound %v", r.ID, j,
					time.Duration(late), time.Duration(r.CoalescedBoundNS))
			}
		}
		for j := 1; j < len(user); j++ {
			want := tr.TokenNS[j] - tr.TokenNS[j-1]
			userErr = append(userErr, math.Abs(float64(user[j]-user[j-1]-want))/1e6)
			if !exact(j-1) || !exact(j) {
				coalesced++
				continue
			}
			kernelErr = append(kernelErr, math.Abs(float64(kern[j]-kern[j-1]-want))/1e6)
		}
	}
	u90 := quantile(userErr, 0.9)
	k90 := quantile(kernelErr, 0.9)
	t.Logf("%d gaps: user-space error p90 %.3f p99 %.3f ms; kernel error p90 %.3f p99 %.3f max %.3f ms "+
		"over %d exact gaps (%d left out as coalesced)", len(userErr), u90, quantile(userErr, 0.99), k90,
		quantile(kernelErr, 0.99), quantile(kernelErr, 1), len(kernelErr), coalesced)
	if len(kernelErr) < 20 {
		t.Fatalf("only %d of %d gaps had exact kernel stamps at both ends: the client fell behind by whole gaps",
			len(kernelErr), len(userErr))
	}
	// p90, not p99: the ground truth is the mock's write start, and on a
	// shared machine the mock's own process is now and then preempted
	// between taking it and writing (a few ms, the host scheduler's
	// slice), which no client stamp can see.
	if k90 > 1 {
		t.Errorf("kernel-stamped gap error p90 %.3f ms > 1 ms", k90)
	}
	if u90 <= k90+1 {
		t.Errorf("user-space gap error p90 %.3f ms did not drift above the kernel's %.3f ms: was the client busy?", u90, k90)
	}
	if s := res.Summary.Steps[0]; s.Clock != "kernel" || s.ClientDelay.Count == 0 || s.ClientDelay.P99 <= 1 {
		t.Errorf("summary: clock %q, client delay %+v: want kernel, and the busy client's delay p99 over 1 ms",
			s.Clock, s.ClientDelay)
	}
}

// spin starts n CPU-bound goroutines that run until the returned stop is
// called or limit passes, whichever is first.
func spin(t *testing.T, n int, limit time.Duration) (stop func()) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := uint64(1)
			for !halt.Load() {
				for range 100_000 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			_ = x
		})
	}
	timer := time.AfterFunc(limit, func() { halt.Store(true) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			timer.Stop()
			halt.Store(true)
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return stop
}

// fetchTruth reads the mock's ground truth, by request id.
func fetchTruth(t *testing.T, url string) map[string]mockllm.Truth {
	t.Helper()
	resp, err := http.Get(url + "/testbed/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]mockllm.Truth{}
	dec := json.NewDecoder(resp.Body)
	for {
		var tr mockllm.Truth
		if err := dec.Decode(&tr); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		out[tr.ID] = tr
	}
}

// quantile is v's q quantile, nearest rank (0 for none); it sorts v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[max(0, min(len(v)-1, int(math.Ceil(q*float64(len(v))))-1))]
}
