package fit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// simulate runs a closed-loop concurrency ladder against the mock's engine
// in virtual time (testing/synctest: the engine's RealClock reads the
// bubble's clock) and returns harness records as a client would write them.
// Each request reaches the engine 100 µs after it is sent, and each chunk is
// seen up to arrivalJitter after its due time, so the fit works on the
// imperfect timings a client records, not on the engine's exact schedule.
func simulate(
	t *testing.T,
	p engine.Profile,
	levels []int,
	perLevel int,
	idle, arrivalJitter time.Duration,
	seed uint64,
) []results.Record {
	t.Helper()
	var recs []results.Record
	synctest.Test(t, func(t *testing.T) {
		sched, err := engine.New(p)
		if err != nil {
			t.Fatal(err)
		}
		defer sched.Close()
		rng := rand.New(rand.NewPCG(seed, 7))
		t0 := time.Now()
		time.Sleep(time.Millisecond) // offsets are > 0: the harness's 0 means "did not happen"
		var mu sync.Mutex
		for li, c := range levels {
			type item struct {
				id        string
				nin, nout int
				jitter    []int64
			}
			items := make([]item, perLevel)
			for i := range items {
				it := item{id: fmt.Sprintf("s%d-%d", li, i), nin: 100 + rng.IntN(1900), nout: 16 + rng.IntN(49)}
				for range it.nout {
					it.jitter = append(it.jitter, rng.Int64N(int64(arrivalJitter)+1))
				}
				items[i] = it
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			for range c {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= perLevel {
							return
						}
						it := items[i]
						sent := int64(time.Since(t0))
						time.Sleep(100 * time.Microsecond)
						st, err := sched.Start(
							context.Background(),
							engine.Request{ID: it.id, PromptTokens: it.nin, OutputTokens: it.nout},
						)
						if err != nil {
							t.Error(err)
							return
						}
						var times []int64
						for {
							tok, ok, err := st.Next(context.Background())
							if err != nil {
								t.Error(err)
								return
							}
							if !ok {
								break
							}
							// The client sees the chunk late by its jitter, and acts
							// (sends its next request) only then.
							time.Sleep(time.Until(tok.Due) + time.Duration(it.jitter[len(times)]))
							times = append(times, int64(time.Since(t0)))
						}
						st.Close()
						r := results.Record{
							ID: it.id, Target: "mock", Step: li, Scenario: "concurrency", Concurrency: c,
							API: "chat", Stream: true, IntendedNS: sent, SentNS: sent,
							FirstTokenNS: times[0], LastTokenNS: times[len(times)-1], DoneNS: times[len(times)-1],
							NIn: it.nin, NOut: it.nout, NOutCounted: it.nout, UsageReported: true, Status: 200,
						}
						for j := 1; j < len(times); j++ {
							r.ChunkGapsNS = append(r.ChunkGapsNS, times[j]-times[j-1])
						}
						mu.Lock()
						recs = append(recs, r)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			time.Sleep(idle)
		}
	})
	sort.Slice(recs, func(a, b int) bool { return recs[a].SentNS < recs[b].SentNS })
	return recs
}

// testEngine is an engine profile with β and the batch cap of the case.
// The token budget is large so prompts never prefill in chunks (an
// assumption of the fit, see steps.go).
func testEngine(b0, b1, b2 float64, maxSeqs int, cold, idleTimeout time.Duration) engine.Profile {
	return engine.Profile{
		Name: "truth", Mode: engine.ModeEngine,
		Beta0US: b0, Beta1US: b1, Beta2US: b2,
		MaxNumSeqs: maxSeqs, MaxNumBatchedTokens: 65536,
		BlockSize: 16, KVCacheBlocks: 28672, MaxModelLen: 32768,
		ColdStart: cold, IdleTimeout: idleTimeout,
	}
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// The round trip: runs against the engine at known β are fitted, and the
// fit recovers β, max_num_seqs and the cold start within 10 %.
func TestFitRecoversEngine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		truth  engine.Profile
		levels []int
		n      int // requests per level
		jitter time.Duration
	}{
		// The H100 preset's fit (docs/facts.md); the ladder passes max_num_seqs, so requests queue.
		{
			"llama3-8b-h100",
			testEngine(5753, 17.25, 6.0, 32, 3*time.Second, 0),
			[]int{1, 8, 32, 64},
			128,
			200 * time.Microsecond,
		},
		// The A100 preset's fit (docs/facts.md), with a client that sees chunks up to 1 ms late.
		{
			"llama3-8b-a100",
			testEngine(16442, 47.8, 18.2, 32, 3*time.Second, 0),
			[]int{1, 8, 32, 64},
			128,
			time.Millisecond,
		},
		// Large β: few requests separate the terms easily.
		{"large beta", testEngine(20000, 100, 500, 8, 5*time.Second, 0), []int{1, 4, 16}, 48, 500 * time.Microsecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs := simulate(t, tc.truth, tc.levels, tc.n, 2*time.Second, tc.jitter, 42)
			res, err := Records(recs)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			res.Print(&out)
			t.Log("\n" + out.String())
			e := res.Engine
			if e == nil {
				t.Fatalf("no engine fit: %v", res.EngineErr)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"β0", e.Beta0US, tc.truth.Beta0US},
				{"β1", e.Beta1US, tc.truth.Beta1US},
				{"β2", e.Beta2US, tc.truth.Beta2US},
				{"cold start", e.ColdStart.Seconds(), tc.truth.ColdStart.Seconds()},
			} {
				if !within(c.got, c.want, 0.10) {
					t.Errorf("%s = %.4g, want %.4g ± 10%%", c.name, c.got, c.want)
				}
			}
			if !e.Saturated || e.MaxNumSeqs != tc.truth.MaxNumSeqs {
				t.Errorf("max_num_seqs = %d (saturated %v), want %d", e.MaxNumSeqs, e.Saturated, tc.truth.MaxNumSeqs)
			}
			if e.Consistency < minConsistency {
				t.Errorf("consistency %.3f below %.2f", e.Consistency, minConsistency)
			}
			if res.Profile.Mode != engine.ModeEngine {
				t.Errorf("profile mode %q, want engine (notes %v)", res.Profile.Mode, res.Notes)
			}
		})
	}
}

// A cold start after every idle period longer than the idle timeout is
// seen at each level's first step, and the idle timeout is bounded by the
// idle time before them.
func TestFitColdAfterIdle(t *testing.T) {
	t.Parallel()
	truth := testEngine(8000, 30, 40, 8, time.Second, 500*time.Millisecond)
	recs := simulate(t, truth, []int{1, 4, 8}, 32, 2*time.Second, 200*time.Microsecond, 7)
	res, err := Records(recs)
	if err != nil {
		t.Fatal(err)
	}
	e := res.Engine
	if e == nil {
		t.Fatalf("no engine fit: %v", res.EngineErr)
	}
	if e.ColdSteps != 3 || !within(e.ColdStart.Seconds(), 1, 0.10) {
		t.Errorf("cold steps %d, cold start %v; want 3 of about 1s", e.ColdSteps, e.ColdStart)
	}
	if e.IdleTimeout < truth.IdleTimeout || e.IdleTimeout > 2*time.Second {
		t.Errorf("idle timeout %v, want between the true %v and the 2s idle gap", e.IdleTimeout, truth.IdleTimeout)
	}
}

// The written profile loads through engine.LoadProfile (what `testbed mock
// --profile FILE` uses) and equals the fitted one.
func TestProfileFileLoads(t *testing.T) {
	t.Parallel()
	recs := simulate(
		t,
		testEngine(20000, 100, 500, 8, time.Second, 0),
		[]int{1, 4, 16},
		32,
		time.Second,
		100*time.Microsecond,
		3,
	)
	res, err := Records(recs, WithName("roundtrip"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := res.WriteProfile(path); err != nil {
		t.Fatal(err)
	}
	p, err := engine.LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, res.Profile) {
		t.Errorf("loaded profile differs:\n got %+v\nwant %+v", p, res.Profile)
	}
	if _, err := engine.New(p); err != nil {
		t.Errorf("the engine refuses the fitted profile: %v", err)
	}
}

// Runs that cannot support an engine fit fall back to a fixed or
// load-curve profile and say why.
func TestFitFallsBackToFixed(t *testing.T) {
	t.Parallel()
	good := simulate(t, testEngine(20000, 100, 500, 64, 0, 0), []int{1, 4, 16}, 32, time.Second, 0, 5)
	oneLevel := simulate(t, testEngine(20000, 100, 500, 64, 0, 0), []int{1}, 32, 0, 0, 5)
	cases := []struct {
		name   string
		recs   []results.Record
		mutate func(r *results.Record, i int)
		want   string // in the notes
	}{
		// One request at a time, one prompt length: every step holds either
		// the one prompt or the one decode, so β0, β1 and β2 cannot be told apart.
		{"one at a time", oneLevel, func(r *results.Record, _ int) { r.NIn = 500 }, "cannot separate"},
		// A server that does not batch in lockstep: every stream runs on its
		// own clock, so chunk bursts do not line up.
		{"no lockstep", good, func(r *results.Record, i int) {
			r.FirstTokenNS += int64(i%7) * 2_700_000
		}, "agree with the reconstructed steps"},
		// Non-streaming responses carry no token times.
		{"not streamed", good, func(r *results.Record, _ int) { r.Stream = false }, "not streamed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs := append([]results.Record(nil), tc.recs...)
			for i := range recs {
				tc.mutate(&recs[i], i)
			}
			res, err := Records(recs)
			if err != nil {
				t.Fatal(err)
			}
			// Without a usable step model the choice is fixed or load_curve,
			// by held-out error; never engine.
			if res.Profile.Mode == engine.ModeEngine || !strings.Contains(strings.Join(res.Notes, " "), tc.want) {
				t.Errorf("mode %q, notes %v; want fixed or load_curve with %q", res.Profile.Mode, res.Notes, tc.want)
			}
			if res.Profile.ITL <= 0 {
				t.Errorf("fixed profile without ITL: %+v", res.Profile)
			}
		})
	}
}
