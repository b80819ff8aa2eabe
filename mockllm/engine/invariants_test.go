package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// workload describes a seeded random run against a step scheduler.
type workload struct {
	n         int           // requests
	gap       time.Duration // mean of the exponential inter-arrival time
	maxPrompt int
	maxOutput int
	abandon   float64 // fraction of streams closed after a few tokens
	seed      uint64
}

// runWorkload plays w against p inside a synctest bubble and checks that
// every request gets exactly its tokens, in order, after it arrived, and
// that the engine ends empty with counters that add up. It returns the
// final Stats.
func runWorkload(t *testing.T, p Profile, w workload) (final Stats, maxWaiting int) {
	synctest.Test(t, func(t *testing.T) {
		s := newEngine(t, p)
		rng := rand.New(rand.NewPCG(w.seed, 2))
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			failures []string
			prompt   uint64
			// Tokens read by abandoned streams are published but the rest
			// never is, so only completed streams are checked exactly.
			minOutput, maxOutput uint64
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for i := range w.n {
			time.Sleep(time.Duration(rng.ExpFloat64() * float64(w.gap)))
			req := Request{
				ID:           fmt.Sprint(i),
				PromptTokens: 1 + rng.IntN(w.maxPrompt),
				OutputTokens: 1 + rng.IntN(w.maxOutput),
			}
			quitAfter := -1
			if rng.Float64() < w.abandon {
				quitAfter = rng.IntN(req.OutputTokens)
			} else {
				prompt += uint64(req.PromptTokens)
				minOutput += uint64(req.OutputTokens)
			}
			maxOutput += uint64(req.OutputTokens)
			arrival := time.Now()
			st, err := s.Start(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			st0 := s.Stats()
			if st0.KVCacheUsage < 0 || st0.KVCacheUsage > 1 {
				t.Fatalf("KVCacheUsage = %v", st0.KVCacheUsage)
			}
			maxWaiting = max(maxWaiting, st0.Waiting)
			wg.Go(func() {
				defer st.Close()
				var last time.Time
				got := 0
				for got != quitAfter {
					tok, ok, err := st.Next(t.Context())
					if err != nil {
						fail("%s: %v", req.ID, err)
						return
					}
					if !ok {
						break
					}
					if tok.Index != got {
						fail("%s: index %d, want %d", req.ID, tok.Index, got)
					}
					if got == 0 && !tok.Due.After(st.Dequeued()) {
						fail("%s: first token due %v, not after dequeue %v", req.ID, tok.Due, st.Dequeued())
					}
					if tok.Due.Before(last) {
						fail("%s: token %d due before its predecessor", req.ID, got)
					}
					last = tok.Due
					got++
				}
				if quitAfter < 0 && got != req.OutputTokens {
					fail("%s: %d tokens, want %d", req.ID, got, req.OutputTokens)
				}
				if got > 0 && st.Dequeued().Before(arrival) {
					fail("%s: dequeued %v before arrival %v", req.ID, st.Dequeued(), arrival)
				}
				time.Sleep(time.Until(last)) // hold the stream until its last token, like the server
			})
		}
		wg.Wait()
		time.Sleep(time.Minute) // past the last step's end
		for _, f := range failures[:min(len(failures), 10)] {
			t.Error(f)
		}
		final = s.Stats()
		if final.Running != 0 || final.Waiting != 0 || final.KVCacheUsage != 0 {
			t.Errorf("engine not empty at the end: %+v", final)
		}
		if final.PromptTokens < prompt || final.DecodedTokens < minOutput || final.DecodedTokens > maxOutput {
			t.Errorf("counted %d prompt / %d decoded tokens, want >= %d / in [%d, %d]",
				final.PromptTokens, final.DecodedTokens, prompt, minOutput, maxOutput)
		}
		if w.abandon == 0 && (final.PromptTokens != prompt || final.DecodedTokens != minOutput) {
			t.Errorf(
				"counted %d prompt / %d decoded tokens, want exactly %d / %d",
				final.PromptTokens,
				final.DecodedTokens,
				prompt,
				minOutput,
			)
		}
	})
	return final, maxWaiting
}

// A seeded random workload larger than the engine: thousands of streams
// waiting, a KV cache small enough to preempt, chunked prefills.
func TestRandomWorkloadInvariants(t *testing.T) {
	t.Parallel()
	n := 2000
	if testing.Short() || raceEnabled {
		n = 500
	}
	p := mustPreset(t, "llama3-8b-h100")
	p.MaxNumSeqs, p.MaxNumBatchedTokens = 64, 2048
	p.KVCacheBlocks, p.MaxModelLen = 1024, 4096 // 16K tokens: preemption territory
	tests := []struct {
		name       string
		w          workload
		minWaiting int // the queue must reach this depth
	}{
		// Overloaded (1000 req/s of ~500-token prompts): the queue grows to thousands.
		{"overload", workload{n: n, gap: time.Millisecond, maxPrompt: 1024, maxOutput: 256, seed: 1}, n * 3 / 4},
		// A third of the clients leave early: their slots and blocks come back.
		{
			"abandon",
			workload{n: n / 4, gap: 5 * time.Millisecond, maxPrompt: 2048, maxOutput: 512, abandon: 0.3, seed: 2},
			0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, waiting := runWorkload(t, p, tt.w)
			if st.Preemptions == 0 {
				t.Error("no preemptions: the workload no longer exercises them")
			}
			if waiting < tt.minWaiting {
				t.Errorf("queue reached %d, want >= %d", waiting, tt.minWaiting)
			}
			t.Logf("%+v, max waiting %d", st, waiting)
		})
	}
}

// FuzzStepScheduler runs small random workloads on random (valid) engine
// shapes: any deadlock, lost token or leaked block fails.
func FuzzStepScheduler(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint16(64), uint16(16), uint8(16), uint8(0))
	f.Add(uint64(2), uint8(1), uint16(1), uint16(1), uint8(1), uint8(50))
	f.Add(uint64(3), uint8(200), uint16(300), uint16(600), uint8(7), uint8(90))
	f.Fuzz(func(t *testing.T, seed uint64, seqs uint8, budget, blocks uint16, bs, abandonPct uint8) {
		p := testProfile()
		p.MaxNumSeqs = 1 + int(seqs)
		p.MaxNumBatchedTokens = p.MaxNumSeqs + int(budget)
		p.BlockSize = 1 + int(bs)
		p.KVCacheBlocks = 2 + int(blocks) // room for 1 prompt + 1 output token
		p.MaxModelLen = p.KVCacheBlocks * p.BlockSize
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		runWorkload(t, p, workload{
			n: 40, gap: time.Millisecond, seed: seed,
			maxPrompt: max(1, p.MaxModelLen/2), maxOutput: max(1, p.MaxModelLen/2),
			abandon: float64(abandonPct%101) / 100,
		})
	})
}
