package engine

import (
	"math"
	"slices"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// ms is a duration in milliseconds, for tables.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// spread is a distribution around med: p1…p99 at the given relative offsets.
func spread(med float64) Quantiles {
	f := [nQuantiles]float64{0.8, 0.9, 0.95, 1, 1.05, 1.12, 1.3}
	var v [nQuantiles]time.Duration
	for i := range v {
		v[i] = ms(med * f[i])
	}
	return QuantilesOf(v)
}

// curveProfile measures 1, 4 and 8 requests in flight: TTFT 40 → 70 → 100
// ms, ITL 10 → 16 → 24 ms, at 500-token prompts, 20 µs per prompt token.
func curveProfile() Profile {
	return Profile{
		Name: "curve", Mode: ModeLoadCurve, MaxModelLen: 32768,
		LoadCurve: LoadCurve{
			PromptTokens: 500, TTFTPerPromptTokenUS: 20,
			Levels: []LoadLevel{
				{InFlight: 1, TTFT: spread(40), ITL: spread(10)},
				{InFlight: 4, TTFT: spread(70), ITL: spread(16)},
				{InFlight: 8, TTFT: spread(100), ITL: spread(24)},
			},
		},
	}
}

// The table is read the documented way between, below and above its levels.
func TestCurveInterpolation(t *testing.T) {
	t.Parallel()
	c := newCurve(curveProfile().LoadCurve)
	tests := []struct {
		name     string
		inFlight int
		itlP50   float64 // ms
	}{
		{"first level", 1, 10},
		// No level below the first: it holds.
		{"below the first", 0, 10},
		{"between 1 and 4", 2, 12},
		{"a level", 4, 16},
		{"between 4 and 8", 6, 20},
		{"last level", 8, 24},
		// Past the last level: the slope of the last two (2 ms per request).
		{"above the last", 12, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := c.at(c.itl, tt.inFlight)
			if got := q[3] / 1e6; math.Abs(got-tt.itlP50) > 1e-9 {
				t.Errorf("ITL p50 at %d in flight = %v ms, want %v", tt.inFlight, got, tt.itlP50)
			}
			if !slices.IsSorted(q[:]) {
				t.Errorf("quantiles out of order: %v", q)
			}
		})
	}
}

// A curve that falls at its top is held flat, not extrapolated to zero.
func TestCurveExtrapolationClamped(t *testing.T) {
	t.Parallel()
	lc := curveProfile().LoadCurve
	lc.Levels[2].ITL = spread(12) // faster at 8 than at 4
	c := newCurve(lc)
	q := c.at(c.itl, 100)
	if got := q[3] / 1e6; math.Abs(got-12) > 1e-9 {
		t.Errorf("ITL p50 at 100 in flight = %v ms, want the last level's 12", got)
	}
}

// Draws by inverse CDF reproduce the stored quantiles, not only the median.
func TestCurveDrawsReproduceQuantiles(t *testing.T) {
	t.Parallel()
	c := newCurve(curveProfile().LoadCurve)
	q := c.at(c.itl, 4)
	n := 200_000
	got := make([]float64, n)
	for i := range got {
		got[i] = draw(&q, (float64(i)+0.5)/float64(n))
	}
	for i, u := range QuantileLevels {
		v := got[int(u*float64(n))]
		if math.Abs(v-q[i]) > 0.002*q[i] {
			t.Errorf("p%g of the draws = %.3f ms, want %.3f", 100*u, v/1e6, q[i]/1e6)
		}
	}
}

// The scheduler draws each request's TTFT at the count in flight at its
// arrival and prompt length, and each ITL at the count when the token
// before it went out; a closed loop at 1 and at 8 shows the two levels.
func TestLoadCurveSchedulerFollowsLoad(t *testing.T) {
	t.Parallel()
	p := curveProfile()
	tests := []struct {
		name    string
		c       int
		prompt  int
		ttft    float64 // ms, p50 wanted
		itl     float64
		ttftTol float64 // relative
	}{
		// One at a time: the first level.
		{"c=1", 1, 500, 40, 10, 0.03},
		// Eight in flight: the last level (the ramp's arrivals see fewer).
		{"c=8", 8, 500, 100, 24, 0.05},
		// 1,500 prompt tokens: 1,000 more than the reference, +20 ms.
		{"c=1 long prompts", 1, 1500, 60, 10, 0.03},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reqs := make([]SimRequest, 400)
			for i := range reqs {
				reqs[i] = SimRequest{Request: Request{PromptTokens: tt.prompt, OutputTokens: 50}}
			}
			res, err := Simulate(p, SimLoad{Concurrency: tt.c, Requests: reqs}, WithSeed(3))
			if err != nil {
				t.Fatal(err)
			}
			var ttft, itl []float64
			for _, r := range res {
				ttft = append(ttft, float64(r.TTFT)/1e6)
				for _, g := range r.Gaps {
					itl = append(itl, float64(g)/1e6)
				}
			}
			if got := median(ttft); math.Abs(got-tt.ttft) > tt.ttftTol*tt.ttft {
				t.Errorf("TTFT p50 %.2f ms, want %.2f ± %.0f%%", got, tt.ttft, 100*tt.ttftTol)
			}
			if got := median(itl); math.Abs(got-tt.itl) > 0.02*tt.itl {
				t.Errorf("ITL p50 %.2f ms, want %.2f ± 2%%", got, tt.itl)
			}
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Equal seeds give equal schedules; the profile's YAML form round-trips.
func TestLoadCurveDeterministicAndYAML(t *testing.T) {
	t.Parallel()
	p := curveProfile()
	run := func(seed int64) []SimResult {
		reqs := []SimRequest{{Request: Request{ID: "a", PromptTokens: 10, OutputTokens: 20}},
			{Request: Request{ID: "b", PromptTokens: 900, OutputTokens: 20}}}
		r, err := Simulate(p, SimLoad{Concurrency: 2, Requests: reqs}, WithSeed(seed))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if a, b := run(1), run(1); !equalResults(a, b) {
		t.Error("equal seeds gave different schedules")
	}
	if a, b := run(1), run(2); equalResults(a, b) {
		t.Error("different seeds gave equal schedules")
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseProfile(data)
	if err != nil {
		t.Fatalf("%s\n%v", data, err)
	}
	if q.LoadCurve.Levels[1].ITL != p.LoadCurve.Levels[1].ITL || q.Mode != ModeLoadCurve {
		t.Errorf("round trip changed the curve:\n%s", data)
	}
}

func equalResults(a, b []SimResult) bool {
	return slices.EqualFunc(a, b, func(x, y SimResult) bool { return x.TTFT == y.TTFT && slices.Equal(x.Gaps, y.Gaps) })
}

// Simulate's engine mode is the step model: a lone request's prompt costs
// β0 + β1·prompt, every later token β0 + β2; two at once share steps.
func TestSimulateEngine(t *testing.T) {
	t.Parallel()
	p := mustPreset(t, "llama3-8b-h100")
	reqs := []SimRequest{{Request: Request{PromptTokens: 1000, OutputTokens: 3}}}
	res, err := Simulate(p, SimLoad{Concurrency: 1, Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	step := 5759 * time.Microsecond
	want := SimResult{TTFT: 23003 * time.Microsecond, Gaps: []time.Duration{step, step}}
	if !equalResults(res, []SimResult{want}) {
		t.Errorf("lone request: %+v, want %+v", res[0], want)
	}
	two := []SimRequest{{Request: Request{PromptTokens: 100, OutputTokens: 3}},
		{Request: Request{PromptTokens: 100, OutputTokens: 3}}}
	res, err = Simulate(p, SimLoad{Requests: two})
	if err != nil {
		t.Fatal(err)
	}
	// Both arrive at 0 and prefill together: β0 + 200·β1, then β0 + 2·β2.
	if got, want := res[1].TTFT, 9203*time.Microsecond; got != want {
		t.Errorf("second request TTFT %v, want %v (one shared step)", got, want)
	}
	if got, want := res[1].Gaps[0], 5765*time.Microsecond; got != want {
		t.Errorf("shared decode step %v, want %v", got, want)
	}
}

// TTFT counts from the request's arrival at the server: the time it
// waited in the HTTP layer before Start comes off its first token's due
// time (at most a second of it; a negative wait is none).
func TestFixedTTFTFromArrival(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		waited time.Duration
		want   time.Duration // first token's due after Start
	}{
		{"no wait", 0, 100 * time.Millisecond},
		{"parsed for 3ms", 3 * time.Millisecond, 97 * time.Millisecond},
		// A wait longer than TTFT makes the token due at once (in the past).
		{"waited past TTFT", 150 * time.Millisecond, -50 * time.Millisecond},
		{"negative", -time.Second, 100 * time.Millisecond},
		{"bounded", time.Hour, 100*time.Millisecond - time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Unix(0, 0)
			s, err := New(mustPreset(t, "ideal"), WithClock(NewVirtualClock(t0)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			st, err := s.Start(t.Context(), Request{PromptTokens: 1, OutputTokens: 1, Waited: tt.waited})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			tok, _, err := st.Next(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Due.Sub(t0); got != tt.want {
				t.Errorf("first token due at %v, want %v", got, tt.want)
			}
		})
	}
}
