package engine

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

func fixedProfile() Profile {
	p, _ := Preset("ideal")
	return p
}

// Fixed mode: token i of a request arriving at a is due at a+TTFT+i·ITL,
// to the nanosecond, however many requests run at once.
func TestFixedDueTimesExact(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := fixedProfile()
		p.TTFT, p.ITL = 123456789*time.Nanosecond, 20*time.Millisecond+7
		s := newEngine(t, p)
		type arrival struct {
			st Stream
			at time.Time
		}
		var all []arrival
		for wave := range 3 {
			for range 500 { // load must not matter
				all = append(all, arrival{start(t, s, 50, 40), time.Now()})
			}
			if got := s.Stats().Running; got != 500*(wave+1) {
				t.Errorf("Running = %d, want %d", got, 500*(wave+1))
			}
			time.Sleep(37*time.Millisecond + 1)
		}
		for k, a := range all {
			if !a.st.Dequeued().Equal(a.at) {
				t.Fatalf("request %d dequeued at %v, want its arrival %v", k, a.st.Dequeued(), a.at)
			}
			dues := drain(t, a.st, a.at)
			for i, d := range dues {
				if want := p.TTFT + time.Duration(i)*p.ITL; d != want {
					t.Fatalf("request %d token %d due at +%v, want +%v", k, i, d, want)
				}
			}
			if len(dues) != 40 {
				t.Fatalf("request %d: %d tokens, want 40", k, len(dues))
			}
		}
		if st := s.Stats(); st.DecodedTokens != 1500*40 || st.PromptTokens != 1500*50 {
			t.Errorf("Stats = %+v", st)
		}
	})
}

// jitterDues returns the due offsets of one request's tokens.
func jitterDues(t *testing.T, p Profile, seed int64, id string, n int) []time.Duration {
	t.Helper()
	s, err := New(p, WithSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Start(t.Context(), Request{ID: id, PromptTokens: 1, OutputTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return drain(t, st, st.Dequeued())
}

func TestFixedJitterDeterministic(t *testing.T) {
	t.Parallel()
	p := fixedProfile()
	p.Jitter = Jitter{Dist: JitterLognormal, CV: 0.3}
	base := jitterDues(t, p, 7, "req-1", 50)
	same := func(a, b []time.Duration) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	tests := []struct {
		name string
		seed int64
		id   string
		same bool
	}{
		{"same seed and id", 7, "req-1", true}, // reproducible run to run
		{"other seed", 8, "req-1", false},      // the seed matters
		{"other request", 7, "req-2", false},   // requests are independent
	}
	for _, tt := range tests {
		if got := jitterDues(t, p, tt.seed, tt.id, 50); same(got, base) != tt.same {
			t.Errorf("%s: same schedule = %v, want %v", tt.name, !tt.same, tt.same)
		}
	}
}

// Every distribution scales TTFT and ITL by a factor of mean 1 and stddev
// CV; the sample moments must match within 5 standard errors.
func TestFixedJitterMoments(t *testing.T) {
	t.Parallel()
	const cv, reqs, toks = 0.2, 200, 100
	tests := []struct {
		dist     string
		kurtosis float64 // upper bound, for the stddev's standard error
	}{
		{JitterNormal, 3},
		{JitterLognormal, 4}, // 3.7 at CV 0.2
		{JitterUniform, 1.8},
	}
	for _, tt := range tests {
		t.Run(tt.dist, func(t *testing.T) {
			t.Parallel()
			p := fixedProfile()
			p.Jitter = Jitter{Dist: tt.dist, CV: cv}
			s, err := New(p, WithSeed(42))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var sum, sum2 float64
			n := 0
			add := func(d, base time.Duration) {
				f := float64(d) / float64(base)
				sum += f
				sum2 += f * f
				n++
			}
			for r := range reqs {
				st, err := s.Start(t.Context(), Request{ID: fmt.Sprint("r", r), PromptTokens: 1, OutputTokens: toks})
				if err != nil {
					t.Fatal(err)
				}
				dues := drain(t, st, st.Dequeued())
				st.Close()
				add(dues[0], p.TTFT)
				for i := 1; i < len(dues); i++ {
					add(dues[i]-dues[i-1], p.ITL)
				}
			}
			mean := sum / float64(n)
			sd := math.Sqrt(sum2/float64(n) - mean*mean)
			seMean := cv / math.Sqrt(float64(n))
			seSD := cv * math.Sqrt((tt.kurtosis-1)/(4*float64(n)))
			if math.Abs(mean-1) > 5*seMean {
				t.Errorf("mean factor %.5f, want 1 ± %.5f", mean, 5*seMean)
			}
			if math.Abs(sd-cv) > 5*seSD {
				t.Errorf("stddev %.5f, want %.2f ± %.5f", sd, cv, 5*seSD)
			}
		})
	}
}

func TestFixedColdStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := fixedProfile()
		p.ColdStart, p.IdleTimeout = 3*time.Second, time.Minute
		s := newEngine(t, p)
		rows := []struct {
			idle time.Duration
			cold bool
		}{
			{0, true},                // first request after start
			{time.Second, false},     // within IdleTimeout
			{time.Minute, true},      // idle for IdleTimeout
			{time.Minute - 1, false}, // just under
		}
		for i, r := range rows {
			time.Sleep(r.idle)
			st := start(t, s, 10, 3)
			t0 := time.Now()
			dues := drain(t, st, t0)
			want := p.TTFT
			if r.cold {
				want += p.ColdStart
			}
			if dues[0] != want {
				t.Errorf("row %d: TTFT %v, want %v", i, dues[0], want)
			}
			// A request arriving during the load waits for it too.
			if r.cold {
				other := start(t, s, 10, 1)
				if d := drain(t, other, t0); d[0] != want {
					t.Errorf("row %d: concurrent TTFT %v, want %v", i, d[0], want)
				}
				other.Close()
			}
			time.Sleep(time.Until(t0.Add(dues[len(dues)-1])))
			st.Close()
		}
	})
}

func TestFixedCloseAndRejects(t *testing.T) {
	t.Parallel()
	p := fixedProfile()
	p.MaxModelLen = 100
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(t.Context(), Request{PromptTokens: 90, OutputTokens: 11}); !errors.Is(err, ErrTooLong) {
		t.Errorf("Start over max_model_len = %v, want ErrTooLong", err)
	}
	st, err := s.Start(t.Context(), Request{PromptTokens: 90, OutputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, _, err := st.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Start(t.Context(), Request{PromptTokens: 1, OutputTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
}
