package engine

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkStep measures one engine step (form, publish, retire) with 256
// running sequences decoding, plus each stream reading its token, without
// the clock: the cost the step loop adds on top of sleeping.
func BenchmarkStep(b *testing.B) {
	for _, seqs := range []int{1, 64, 256} {
		b.Run(strconv.Itoa(seqs)+"seqs", func(b *testing.B) {
			p := mustPreset(b, "llama3-8b-h100")
			p.MaxNumSeqs = seqs
			// Room for sequences that never finish within b.N steps.
			p.KVCacheBlocks, p.MaxModelLen = 1<<31, 1<<31
			e := newStepCore(p, options{clock: RealClock{}})
			ctx := context.Background()
			streams := make([]Stream, seqs)
			for i := range streams {
				st, err := e.Start(ctx, Request{PromptTokens: 16, OutputTokens: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				streams[i] = st
			}
			now := e.since(time.Now()) // after every arrival
			step := func() {
				e.mu.Lock()
				e.takeInbox()
				e.dropAbandoned()
				end := e.form(now)
				e.retire(end)
				e.mu.Unlock()
				now = end
				for _, st := range streams {
					if _, _, err := st.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			step() // prefill
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(seqs), "ns/token")
			if e.Stats().Running != seqs {
				b.Fatalf("Running = %d, want %d", e.Stats().Running, seqs)
			}
		})
	}
}

// BenchmarkFixedNext is the fixed mode's per-token cost: one due-time
// computation, with and without jitter; and load_curve's, which draws
// each gap from the curve at the count in flight.
func BenchmarkFixedNext(b *testing.B) {
	for _, dist := range []string{JitterNone, JitterLognormal, ModeLoadCurve} {
		b.Run(dist, func(b *testing.B) {
			p := mustPreset(b, "ideal")
			p.Jitter = Jitter{Dist: dist, CV: 0.2}
			if dist == ModeLoadCurve {
				p = curveProfile()
			}
			p.MaxModelLen = 0 // b.N tokens in one stream
			s, err := New(p, WithSeed(1))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			st, err := s.Start(ctx, Request{ID: "bench", PromptTokens: 1, OutputTokens: b.N})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			b.ReportAllocs()
			for range b.N {
				if _, ok, err := st.Next(ctx); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
