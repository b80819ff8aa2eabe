package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A seeded random workload larger than the engine: thousands of streams
// waiting, a KV cache small enough to preempt, chunked prefills. Every
// request must get exactly its tokens, in order, after it arrived, and the
// engine must end empty with counters that add up.
func TestRandomWorkloadInvariants(t *testing.T) {
	t.Parallel()
	n := 3000
	if testing.Short() {
		n = 300
	}
	synctest.Test(t, func(t *testing.T) {
		p := mustPreset(t, "llama3-8b-h100")
		p.MaxNumSeqs, p.MaxNumBatchedTokens = 64, 2048
		p.KVCacheBlocks, p.MaxModelLen = 1024, 4096 // 16K tokens: preemption territory
		s := newEngine(t, p)
		rng := rand.New(rand.NewPCG(1, 2))
		var (
			wg             sync.WaitGroup
			mu             sync.Mutex
			failures       []string
			prompt, output uint64
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for i := range n {
			time.Sleep(time.Duration(rng.ExpFloat64() * float64(2*time.Millisecond))) // Poisson, 500 req/s
			req := Request{ID: fmt.Sprint(i), PromptTokens: 1 + rng.IntN(2048), OutputTokens: 1 + rng.IntN(512)}
			prompt += uint64(req.PromptTokens)
			output += uint64(req.OutputTokens)
			arrival := time.Now()
			st, err := s.Start(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if u := s.Stats().KVCacheUsage; u < 0 || u > 1 {
				t.Fatalf("KVCacheUsage = %v", u)
			}
			wg.Go(func() {
				defer st.Close()
				var last time.Time
				got := 0
				for {
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
				if got != req.OutputTokens {
					fail("%s: %d tokens, want %d", req.ID, got, req.OutputTokens)
				}
				if st.Dequeued().Before(arrival) {
					fail("%s: dequeued %v before arrival %v", req.ID, st.Dequeued(), arrival)
				}
				time.Sleep(time.Until(last)) // hold the stream open until its last token, like the server
			})
		}
		wg.Wait()
		time.Sleep(time.Second) // past the last step's end
		for _, f := range failures[:min(len(failures), 10)] {
			t.Error(f)
		}
		st := s.Stats()
		if st.Running != 0 || st.Waiting != 0 || st.KVCacheUsage != 0 {
			t.Errorf("engine not empty at the end: %+v", st)
		}
		if st.PromptTokens != prompt || st.DecodedTokens != output {
			t.Errorf("counted %d prompt / %d decoded tokens, want %d / %d", st.PromptTokens, st.DecodedTokens, prompt, output)
		}
		if st.Preemptions == 0 {
			t.Error("no preemptions: the workload no longer exercises them")
		}
		t.Logf("%d requests, %+v", n, st)
	})
}
