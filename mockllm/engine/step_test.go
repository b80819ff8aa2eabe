package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Engine tests run inside testing/synctest bubbles: RealClock then reads
// the bubble's virtual time, which jumps to the next timer only when every
// goroutine is blocked, so schedules are exact to the nanosecond and a
// simulated minute costs microseconds.

// us converts µs (as the β model writes them) to a Duration, rounded to
// the ns as the engine does.
func us(v float64) time.Duration { return time.Duration(v*1e3 + 0.5) }

// testProfile is a small engine with round β values.
func testProfile() Profile {
	return Profile{
		Name: "test", Mode: ModeEngine,
		Beta0US: 1000, Beta1US: 10, Beta2US: 5,
		MaxNumSeqs: 8, MaxNumBatchedTokens: 8192,
		BlockSize: 16, KVCacheBlocks: 4096, MaxModelLen: 32768,
	}
}

func newEngine(t *testing.T, p Profile) Scheduler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func start(t *testing.T, s Scheduler, prompt, output int) Stream {
	t.Helper()
	st, err := s.Start(
		t.Context(),
		Request{ID: fmt.Sprint("r", prompt, "-", output), PromptTokens: prompt, OutputTokens: output},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// drain reads every token of st and returns their due times relative to t0.
func drain(t *testing.T, st Stream, t0 time.Time) []time.Duration {
	t.Helper()
	var dues []time.Duration
	for {
		tok, ok, err := st.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return dues
		}
		if tok.Index != len(dues) {
			t.Fatalf("token index %d, want %d", tok.Index, len(dues))
		}
		dues = append(dues, tok.Due.Sub(t0))
	}
}

// steps returns the cumulative ends of consecutive steps of the given durations.
func steps(from time.Duration, durs ...time.Duration) []time.Duration {
	out := make([]time.Duration, len(durs))
	for i, d := range durs {
		from += d
		out[i] = from
	}
	return out
}

func repeat(d time.Duration, n int) []time.Duration { return repeatSlice(d, n) }

func ints(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func repeatSlice[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func equalDurations(t *testing.T, what string, got, want []time.Duration) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tokens, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: token %d due at %v, want %v\n got %v\nwant %v", what, i, got[i], want[i], got, want)
		}
	}
}

func TestStepTimesFollowBetaModel(t *testing.T) {
	t.Parallel()
	p := testProfile()
	b0 := p.Beta0US
	b1 := p.Beta1US
	b2 := p.Beta2US
	tests := []struct {
		name    string
		mutate  func(p *Profile)
		prompts []int // all arrive together (gathered by a cold start)
		output  int
		want    func() [][]time.Duration // per request, due times after the cold start
	}{
		{
			// One prefill step for the whole batch, then β0 + 4·β2 per decode step.
			name: "4 seqs decoding", prompts: []int{100, 100, 100, 100}, output: 5,
			want: func() [][]time.Duration {
				d := steps(0, append([]time.Duration{us(b0 + 400*b1)}, repeat(us(b0+4*b2), 4)...)...)
				return [][]time.Duration{d, d, d, d}
			},
		},
		{
			// A 20000-token prompt under an 8192 budget prefills in 3 chunks; its
			// first token comes at the end of the step that finishes it.
			name: "chunked prefill", prompts: []int{20000}, output: 3,
			want: func() [][]time.Duration {
				return [][]time.Duration{
					steps(0, us(b0+8192*b1), us(b0+8192*b1), us(b0+3616*b1), us(b0+b2), us(b0+b2))[2:],
				}
			},
		},
		{
			// Budget 300: the first prompt takes 200, the second gets 100 and
			// finishes its prefill in step 2 beside the first one's decode.
			name: "budget split", mutate: func(p *Profile) { p.MaxNumBatchedTokens = 300 },
			prompts: []int{200, 150}, output: 3,
			want: func() [][]time.Duration {
				s := steps(0, us(b0+300*b1), us(b0+50*b1+b2), us(b0+2*b2), us(b0+b2))
				return [][]time.Duration{s[0:3], s[1:4]}
			},
		},
		{
			// The per-context term charges every scheduled token's context.
			name: "context term", mutate: func(p *Profile) { p.Beta3US = 0.5 },
			prompts: []int{100}, output: 3,
			want: func() [][]time.Duration {
				return [][]time.Duration{steps(0, us(b0+100*b1+100*0.5), us(b0+b2+101*0.5), us(b0+b2+102*0.5))}
			},
		},
		{
			// The H100 fit: a 256-way batch decodes at 5753 + 256·6 µs per step.
			name:    "h100 preset at 256 seqs",
			mutate:  func(p *Profile) { *p = mustPreset(t, "llama3-8b-h100") },
			prompts: ints(256, 32), output: 3,
			want: func() [][]time.Duration {
				d := steps(0, us(5753+256*32*17.25), us(5753+256*6.0), us(5753+256*6.0))
				return [][]time.Duration(repeatSlice(d, 256))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p := testProfile()
				if tt.mutate != nil {
					tt.mutate(&p)
				}
				p.ColdStart = time.Second // gathers the simultaneous arrivals into one first step
				s := newEngine(t, p)
				t0 := time.Now()
				var sts []Stream
				for _, n := range tt.prompts {
					sts = append(sts, start(t, s, n, tt.output))
				}
				want := tt.want()
				for i, st := range sts {
					got := drain(t, st, t0.Add(p.ColdStart))
					equalDurations(t, fmt.Sprintf("request %d", i), got, want[i])
					if d := st.Dequeued().Sub(t0); d != p.ColdStart {
						t.Errorf("request %d dequeued at %v, want %v (end of cold start)", i, d, p.ColdStart)
					}
				}
			})
		})
	}
}

// A prompt arriving while others decode joins the next step, which then
// costs β0 + β1·prompt + β2·decoders.
func TestPrefillJoinsDecodeBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.ColdStart = time.Second
		b0 := p.Beta0US
		b1 := p.Beta1US
		b2 := p.Beta2US
		s := newEngine(t, p)
		t0 := time.Now().Add(p.ColdStart)
		var sts []Stream
		for range 4 {
			sts = append(sts, start(t, s, 100, 5))
		}
		// Arrive in the middle of step 2.
		s2 := us(b0 + 400*b1)
		time.Sleep(p.ColdStart + s2 + 100*time.Microsecond)
		late := start(t, s, 1000, 2)

		s3 := s2 + us(b0+4*b2)
		// Steps: prefill 4×100; decode 4; decode 4 + prefill 1000; decode 5;
		// decode 4 (the late request finished its 2 tokens).
		want4 := steps(0, us(b0+400*b1), us(b0+4*b2), us(b0+1000*b1+4*b2), us(b0+5*b2), us(b0+4*b2))
		for i, st := range sts {
			equalDurations(t, fmt.Sprint("decoder ", i), drain(t, st, t0), want4)
		}
		equalDurations(t, "late prompt", drain(t, late, t0), want4[2:4])
		if d := late.Dequeued().Sub(t0); d != s3 {
			t.Errorf("late prompt dequeued at %v, want %v (start of step 3)", d, s3)
		}
	})
}

// With max_num_seqs = 1, N requests arriving together are served one after
// the other: the i-th (0-based) waits for i whole requests, each one prefill
// step and O−1 decode steps, so TTFT_i = i·(β0+β1·P + (O−1)(β0+β2)) + β0+β1·P.
func TestTTFTGrowsWithQueueDepth(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.MaxNumSeqs = 1
		const n, prompt, output = 6, 200, 10
		s := newEngine(t, p)
		t0 := time.Now()
		var sts []Stream
		for range n {
			sts = append(sts, start(t, s, prompt, output))
		}
		prefill := us(p.Beta0US + prompt*p.Beta1US)
		service := prefill + (output-1)*us(p.Beta0US+p.Beta2US)
		for i, st := range sts {
			dues := drain(t, st, t0)
			if want := time.Duration(i)*service + prefill; dues[0] != want {
				t.Errorf("request %d: TTFT %v, want %v", i, dues[0], want)
			}
			if want := time.Duration(i) * service; st.Dequeued().Sub(t0) != want {
				t.Errorf("request %d: dequeued at %v, want %v", i, st.Dequeued().Sub(t0), want)
			}
		}
	})
}

// A small KV cache makes requests wait: two requests of 2 blocks each fill
// a 4-block cache, so the third leaves the queue only when the first ones
// finish and free their blocks.
func TestKVCapacityQueues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.KVCacheBlocks, p.MaxModelLen = 4, 64
		p.ColdStart = time.Second
		s := newEngine(t, p)
		t0 := time.Now()
		// 24 prompt + 9 output − 1 = 32 cached tokens = 2 blocks, all taken at admission.
		a := start(t, s, 24, 9)
		b := start(t, s, 24, 9)
		c := start(t, s, 24, 9)
		da, db := drain(t, a, t0), drain(t, b, t0)
		_ = drain(t, c, t0)
		if got := a.Dequeued().Sub(t0); got != p.ColdStart || b.Dequeued().Sub(t0) != p.ColdStart {
			t.Errorf("first two dequeued at %v, %v; want %v", got, b.Dequeued().Sub(t0), p.ColdStart)
		}
		if got, want := c.Dequeued().Sub(t0), max(da[len(da)-1], db[len(db)-1]); got != want {
			t.Errorf("third dequeued at %v, want %v (when the first two finished)", got, want)
		}
		if st := s.Stats(); st.Preemptions != 0 {
			t.Errorf("Preemptions = %d, want 0 (blocks were reserved at admission)", st.Preemptions)
		}
	})
}

// Sequences that outgrow the cache preempt the most recent one, which
// recomputes later; the schedule is exact. Two requests (16 prompt, 40
// output) share 4 blocks of 16 tokens:
//   - step 1 prefills both (1 block each), steps 2–17 decode both (2 blocks
//     each once they pass 16 tokens);
//   - step 18: the first needs a 3rd block, none is free, so the second
//     (most recent) is preempted after 17 tokens; the first decodes alone
//     to its 40th token at step 40;
//   - step 41 recomputes the second's 16+17 tokens as prefill and samples
//     its 18th token; steps 42–63 decode the rest.
func TestPreemptionByRecompute(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.KVCacheBlocks, p.MaxModelLen = 4, 64
		p.ColdStart = time.Second
		b0 := p.Beta0US
		b1 := p.Beta1US
		b2 := p.Beta2US
		s := newEngine(t, p)
		t0 := time.Now().Add(p.ColdStart)
		a, b := start(t, s, 16, 40), start(t, s, 16, 40)
		durs := []time.Duration{us(b0 + 32*b1)}
		durs = append(durs, repeat(us(b0+2*b2), 16)...) // steps 2–17
		durs = append(durs, repeat(us(b0+b2), 23)...)   // steps 18–40
		durs = append(durs, us(b0+33*b1))               // step 41: recompute
		durs = append(durs, repeat(us(b0+b2), 22)...)   // steps 42–63
		ends := steps(0, durs...)
		equalDurations(t, "first", drain(t, a, t0), ends[:40])
		equalDurations(t, "preempted", drain(t, b, t0), append(ends[:17:17], ends[40:]...))
		time.Sleep(time.Until(t0.Add(ends[len(ends)-1] + 1))) // past the last step's end
		st := s.Stats()
		if st.Preemptions != 1 {
			t.Errorf("Preemptions = %d, want 1", st.Preemptions)
		}
		if st.Running != 0 || st.Waiting != 0 || st.KVCacheUsage != 0 {
			t.Errorf("after both finished: %+v, want an empty engine", st)
		}
		if st.DecodedTokens != 80 || st.PromptTokens != 32 {
			t.Errorf("tokens: decoded %d prompt %d, want 80 and 32", st.DecodedTokens, st.PromptTokens)
		}
		if d := b.Dequeued().Sub(t0); d != 0 {
			t.Errorf("preempted request's Dequeued moved to %v; it is its first admission", d)
		}
	})
}

// The first request after start, and the first after IdleTimeout without
// work, pay ColdStart before their first step.
func TestColdStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.ColdStart, p.IdleTimeout = 2*time.Second, 10*time.Second
		s := newEngine(t, p)
		warm := us(p.Beta0US + 100*p.Beta1US)
		ttft := func(st Stream) time.Duration {
			t0 := time.Now()
			d := drain(t, st, t0)
			time.Sleep(time.Until(t0.Add(d[len(d)-1]))) // to the last token, like a client
			return d[0]
		}
		rows := []struct {
			idle time.Duration
			want time.Duration
		}{
			{0, p.ColdStart + warm},                 // first request after start
			{5 * time.Second, warm},                 // idle less than IdleTimeout: warm
			{p.IdleTimeout, p.ColdStart + warm},     // idle for IdleTimeout: cold again
			{p.IdleTimeout - time.Nanosecond, warm}, // just under: warm
		}
		for i, r := range rows {
			time.Sleep(r.idle)
			if got := ttft(start(t, s, 100, 2)); got != r.want {
				t.Errorf("row %d (idle %v): TTFT %v, want %v", i, r.idle, got, r.want)
			}
		}
	})
}

func TestQueueLimitAndAbandon(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.MaxNumSeqs = 1
		p.MaxNumBatchedTokens = 1
		p.MaxWaiting = 2
		p.ColdStart = time.Second // nobody is admitted yet
		s := newEngine(t, p)
		a := start(t, s, 10, 5)
		_ = start(t, s, 10, 5)
		if _, err := s.Start(t.Context(), Request{ID: "c", PromptTokens: 10, OutputTokens: 5}); !errors.Is(
			err,
			ErrQueueFull,
		) {
			t.Fatalf("third Start = %v, want ErrQueueFull", err)
		}
		if w := s.Stats().Waiting; w != 2 {
			t.Errorf("Waiting = %d, want 2", w)
		}
		a.Close() // a waiting request leaves the queue at once
		if w := s.Stats().Waiting; w != 1 {
			t.Errorf("after Close: Waiting = %d, want 1", w)
		}
		c := start(t, s, 10, 5)
		if d := drain(t, c, time.Now()); len(d) != 5 {
			t.Errorf("got %d tokens, want 5", len(d))
		}
	})
}

// Closing a running stream frees its slot and blocks at the next step.
func TestCloseReleasesRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		p.KVCacheBlocks, p.MaxModelLen = 4, 64
		p.ColdStart = time.Second
		s := newEngine(t, p)
		t0 := time.Now()
		a, b := start(t, s, 24, 9), start(t, s, 24, 9)
		c := start(t, s, 24, 9)
		closeAt := p.ColdStart + us(p.Beta0US+48*p.Beta1US) + 300*time.Microsecond // inside step 2
		time.Sleep(closeAt)
		a.Close()
		db := drain(t, b, t0)
		_ = drain(t, c, t0)
		var want time.Duration // first step boundary after the close
		for _, d := range db {
			if d > closeAt {
				want = d
				break
			}
		}
		if got := c.Dequeued().Sub(t0); got != want {
			t.Errorf("third dequeued at %v, want %v (the step after the close)", got, want)
		}
	})
}

func TestCloseScheduler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, err := New(testProfile())
		if err != nil {
			t.Fatal(err)
		}
		st := start(t, s, 10, 1000)
		if _, _, err := st.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, _, err := st.Next(t.Context()); !errors.Is(err, ErrClosed) {
			t.Errorf("Next after Close = %v, want ErrClosed", err)
		}
		if _, err := s.Start(t.Context(), Request{PromptTokens: 1, OutputTokens: 1}); !errors.Is(err, ErrClosed) {
			t.Errorf("Start after Close = %v, want ErrClosed", err)
		}
	})
}

func TestStepRejects(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		s := newEngine(t, p)
		tests := []struct {
			name string
			req  Request
			want error
		}{
			// Prompt plus output above max_model_len.
			{"too long", Request{PromptTokens: 32000, OutputTokens: 769}, ErrTooLong},
			// vLLM needs at least one prompt token.
			{"empty prompt", Request{PromptTokens: 0, OutputTokens: 1}, nil},
			{"negative output", Request{PromptTokens: 1, OutputTokens: -1}, nil},
		}
		for _, tt := range tests {
			_, err := s.Start(t.Context(), tt.req)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("%s: Start = %v, want error %v", tt.name, err, tt.want)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.Start(ctx, Request{PromptTokens: 1, OutputTokens: 1}); !errors.Is(err, context.Canceled) {
			t.Errorf("Start with a dead context = %v", err)
		}
	})
}
