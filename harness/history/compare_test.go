package history

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// synthRun is a run of one step whose TTFT samples are drawn from a
// normal distribution of the given mean (ms) and relative spread.
func synthRun(id string, seed uint64, n int, meanMS, spread float64) *Run {
	rng := rand.New(rand.NewPCG(seed, 7))
	var m results.Metric
	for range n {
		m.Add(int64((meanMS+rng.NormFloat64()*meanMS*spread)*1e6), 1)
	}
	sum := results.StepSummary{Target: "t", Scenario: "concurrency", Concurrency: 4, OK: n, Requests: n}
	h := results.StepHistograms{Target: "t", Scenario: "concurrency", Concurrency: 4,
		Metrics: map[string]*results.Metric{"ttft_ms": &m}}
	return &Run{ID: id, Status: StatusComplete, Steps: []Step{{Summary: sum, Histograms: h}}}
}

// TestCompareVerdicts: the verdict follows the size and the certainty of
// a change, not a threshold on two numbers.
func TestCompareVerdicts(t *testing.T) {
	t.Parallel()
	rules := DefaultRules()
	rules.Metrics = []string{"ttft_p50", "ttft_p90", "ttft_mean"}
	for _, tt := range []struct {
		name    string
		n       int
		factor  float64
		spread  float64
		want    string
		metrics int // how many of the three get the verdict
	}{
		{"same", 400, 1, 0.05, Unchanged, 3},            // another draw of the same distribution
		{"10 % slower", 400, 1.10, 0.05, Regressed, 3},  // clear and large
		{"10 % faster", 400, 0.90, 0.05, Improved, 3},   // clear and large, the good way
		{"2 % slower", 20000, 1.02, 0.05, Unchanged, 3}, // certain but below the minimum effect
		{"few samples", 5, 1.5, 0.05, NotJudged, 3},     // fewer than MinSamples
		{"noisy 10 %", 12, 1.10, 0.4, Unchanged, 3},     // large but uncertain
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Compare(synthRun("base", 1, tt.n, 100, tt.spread), synthRun("new", 2, tt.n, 100*tt.factor, tt.spread), rules)
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, ch := range c.Steps[0].Changes {
				if ch.Verdict == tt.want {
					got++
				}
				if ch.NotJudgedWhy == "" && !(ch.Lo <= ch.Rel && ch.Rel <= ch.Hi) {
					t.Errorf("%s: change %g outside its interval [%g, %g]", ch.Metric, ch.Rel, ch.Lo, ch.Hi)
				}
			}
			if got < tt.metrics {
				var b bytes.Buffer
				_ = c.WriteTable(&b)
				t.Errorf("%d metrics %s, want %d:\n%s", got, tt.want, tt.metrics, b.String())
			}
		})
	}
}

// TestCompareOnMock is the check a CI gate relies on: two runs of one plan
// against the mock are unchanged; against a mock 10 % slower, regressed,
// naming the metric and the step. It times real streams, so it runs
// alone (not parallel) and, under the race detector, only logs.
func TestCompareOnMock(t *testing.T) {
	const ttft, itl = 100 * time.Millisecond, 10 * time.Millisecond
	base := mockRun(t, ttft, itl, 40, 4)
	same := mockRun(t, ttft, itl, 40, 4)
	slow := mockRun(t, ttft*11/10, itl*11/10, 40, 4)
	read := func(dir string) *Run {
		r, err := FromDir(dir, "run", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tt := range []struct {
		name      string
		dir       string
		regressed bool
	}{
		{"same plan", same, false}, // run-to-run noise only
		{"10 % slower", slow, true},
	} {
		c, err := Compare(read(base), read(tt.dir), DefaultRules())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := c.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		regs := c.Regressions()
		check := t.Errorf
		if raceEnabled {
			check = t.Logf
		}
		if (len(regs) > 0) != tt.regressed {
			check("%s: regressions %q, want regressed=%t\n%s", tt.name, regs, tt.regressed, b.String())
		}
		if tt.regressed && !strings.Contains(b.String(), "at mock concurrency c=4") {
			check("%s: the verdict does not name metric and step:\n%s", tt.name, b.String())
		}
		t.Logf("%s:\n%s", tt.name, b.String())
	}
}

func TestRulesValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		edit func(*Rules)
		want string
	}{
		{"defaults", func(*Rules) {}, ""},
		{"no metric", func(r *Rules) { r.Metrics = nil }, "no metric"},
		{"bad metric", func(r *Rules) { r.Metrics = []string{"ttft_p100"} }, "percentile"},
		{"rate", func(r *Rules) { r.Metrics = []string{"requests_per_s"} }, "rate"},
		{"confidence", func(r *Rules) { r.Confidence = 99 }, "confidence"},
		{"effect", func(r *Rules) { r.MinEffect = -1 }, "minimum effect"},
	} {
		r := DefaultRules()
		tt.edit(&r)
		err := r.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestParseMetric(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		hist string
		q    float64
		bad  bool
	}{
		{in: "ttft_p99", hist: "ttft_ms", q: 99},     // the usual
		{in: "e2e_p999", hist: "e2e_ms", q: 99.9},    // p999 = 99.9
		{in: "itl_p99.99", hist: "itl_ms", q: 99.99}, // explicit decimals
		{in: "tpot_mean", hist: "tpot_ms", q: -1},    // mean
		{in: "ttft_from_schedule_p50", hist: "ttft_from_schedule_ms", q: 50},
		{in: "output_tokens_per_s"},  // a rate
		{in: "ttft", bad: true},      // no statistic
		{in: "foo_p50", bad: true},   // unknown latency
		{in: "ttft_p0", bad: true},   // out of range
		{in: "ttft_p1e1", bad: true}, // not a plain number
	} {
		m, err := ParseMetric(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && (m.Hist != tt.hist || (m.Hist != "" && m.Quantile != tt.q))) {
			t.Errorf("ParseMetric(%q) = %+v, %v", tt.in, m, err)
		}
	}
}

func FuzzParseMetric(f *testing.F) {
	for _, s := range []string{"ttft_p99", "itl_mean", "e2e_p999", "requests_per_s", "x_p", "ttft_p99.9.9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMetric(s)
		if err != nil {
			return
		}
		if m.Rate == "" && (m.Hist == "" || !(m.Quantile == -1 || (m.Quantile > 0 && m.Quantile < 100))) {
			t.Errorf("ParseMetric(%q) = %+v", s, m)
		}
	})
}

func FuzzParseShare(f *testing.F) {
	for _, s := range []string{"5%", "0.05", " 10 % ", "-1", "NaN", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseShare(s)
		if err == nil && !(v >= 0) {
			t.Errorf("ParseShare(%q) = %g", s, v)
		}
	})
}
