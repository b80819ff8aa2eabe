package engine

import (
	"fmt"
	"math"
	"time"
)

// The load_curve mode serves TTFT and ITL as measured distributions that
// depend on the number of requests in flight at the server, for servers
// whose latency grows with load without batching in lockstep (hosted APIs
// behind a gateway, routers over replicas, simulators): the table of a
// LoadCurve is what `testbed fit` measured at each in-flight count.
//
// Which count a draw uses: a request's TTFT is drawn at the count when it
// arrives (itself included); the gap before token i > 0 is drawn at the
// count when token i is handed out, which is when the mock has just
// written token i−1. A request counts from Start until its stream is
// closed; the mock closes it just before writing the end of the response,
// so a closed-loop client, which sends its next request once it has read
// that end, never finds the last one still counted. `testbed fit` counts
// the same way from client records (from a request's send until it was
// fully read).
//
// Between two levels every quantile is interpolated linearly in the count;
// below the first level the first level holds (no extrapolation towards
// zero load); above the last, each quantile grows linearly with the slope
// of the last two levels, clamped at zero growth (a curve that fell at the
// top is held flat rather than extrapolated to zero), and the quantiles
// are then kept in order. A draw is the inverse CDF at a uniform variate
// from the stream's seeded generator: piecewise linear between the stored
// quantiles, flat below p1 and above p99, so the mock reproduces the
// measured p1…p99 and does not invent a tail beyond.

// QuantileLevels are the cumulative probabilities of the fields of Quantiles.
var QuantileLevels = [nQuantiles]float64{0.01, 0.10, 0.25, 0.50, 0.75, 0.90, 0.99}

const nQuantiles = 7

// Quantiles is a latency distribution by its quantiles, in increasing order.
type Quantiles struct {
	P1  time.Duration `yaml:"p1"`
	P10 time.Duration `yaml:"p10"`
	P25 time.Duration `yaml:"p25"`
	P50 time.Duration `yaml:"p50"`
	P75 time.Duration `yaml:"p75"`
	P90 time.Duration `yaml:"p90"`
	P99 time.Duration `yaml:"p99"`
}

// QuantilesOf builds Quantiles from values at QuantileLevels.
func QuantilesOf(v [nQuantiles]time.Duration) Quantiles {
	return Quantiles{P1: v[0], P10: v[1], P25: v[2], P50: v[3], P75: v[4], P90: v[5], P99: v[6]}
}

// Values returns the quantiles in the order of QuantileLevels.
func (q Quantiles) Values() [nQuantiles]time.Duration {
	return [nQuantiles]time.Duration{q.P1, q.P10, q.P25, q.P50, q.P75, q.P90, q.P99}
}

// LoadCurve is the load_curve mode's table (see the comment above for how
// it is read).
type LoadCurve struct {
	// Levels are the measured in-flight counts, strictly increasing.
	Levels []LoadLevel `yaml:"levels"`
	// PromptTokens is the prompt length the levels' TTFT stand for: a
	// request's TTFT is shifted by TTFTPerPromptTokenUS × (its prompt −
	// PromptTokens) µs, and never below 0.
	PromptTokens int `yaml:"prompt_tokens"`
	// TTFTPerPromptTokenUS is TTFT's growth with prompt length, µs/token.
	TTFTPerPromptTokenUS float64 `yaml:"ttft_per_prompt_token_us"`
}

// LoadLevel is the latency measured while InFlight requests were in flight.
type LoadLevel struct {
	InFlight int       `yaml:"in_flight"`
	TTFT     Quantiles `yaml:"ttft"`
	ITL      Quantiles `yaml:"itl"`
	// TTFTSamples and ITLSamples say how many measurements the level rests
	// on; the model does not use them.
	TTFTSamples int `yaml:"ttft_samples,omitempty"`
	ITLSamples  int `yaml:"itl_samples,omitempty"`
}

// Validity is the range of load and prompt length a fitted profile was
// fitted on; the mock warns when it is driven outside. Zero bounds state
// nothing.
type Validity struct {
	MinInFlight     int `yaml:"min_in_flight,omitempty"`
	MaxInFlight     int `yaml:"max_in_flight,omitempty"`
	MinPromptTokens int `yaml:"min_prompt_tokens,omitempty"`
	MaxPromptTokens int `yaml:"max_prompt_tokens,omitempty"`
}

// Stated reports whether v bounds anything.
func (v Validity) Stated() bool { return v != Validity{} }

// Outside says in which direction a request at inFlight requests and
// prompt tokens falls outside v: dimension "in_flight" or "prompt_tokens",
// direction "below" or "above"; ok is false when it is inside.
func (v Validity) Outside(inFlight, prompt int) (dimension, direction string, ok bool) {
	switch {
	case v.MaxInFlight > 0 && inFlight > v.MaxInFlight:
		return "in_flight", "above", true
	case v.MinInFlight > 0 && inFlight < v.MinInFlight:
		return "in_flight", "below", true
	case v.MaxPromptTokens > 0 && prompt > v.MaxPromptTokens:
		return "prompt_tokens", "above", true
	case v.MinPromptTokens > 0 && prompt < v.MinPromptTokens:
		return "prompt_tokens", "below", true
	}
	return "", "", false
}

// checkLevels returns what is wrong with the table, or "".
func (c LoadCurve) checkLevels() string {
	if len(c.Levels) == 0 {
		return "no levels"
	}
	prev := 0
	for i, l := range c.Levels {
		if l.InFlight <= prev {
			return fmt.Sprintf("level %d: in_flight %d must be >= 1 and above the level before (%d)",
				i, l.InFlight, prev)
		}
		prev = l.InFlight
		for _, d := range []struct {
			name string
			q    Quantiles
		}{{"ttft", l.TTFT}, {"itl", l.ITL}} {
			if why := d.q.check(); why != "" {
				return fmt.Sprintf("level %d (in_flight %d): %s %s", i, l.InFlight, d.name, why)
			}
		}
	}
	return ""
}

// check returns what is wrong with q, or "".
func (q Quantiles) check() string {
	v := q.Values()
	if v[0] < 0 {
		return fmt.Sprintf("p1 %v must be >= 0", v[0])
	}
	for i := 1; i < len(v); i++ {
		if v[i] < v[i-1] {
			return fmt.Sprintf("quantiles must not decrease: p%g %v < p%g %v",
				100*QuantileLevels[i], v[i], 100*QuantileLevels[i-1], v[i-1])
		}
	}
	return ""
}

// curve is a LoadCurve prepared for drawing: no allocation per draw.
type curve struct {
	n         []float64 // in-flight count of each level
	ttft, itl [][nQuantiles]float64
	refPrompt float64
	slope     float64 // ns of TTFT per prompt token
}

func newCurve(c LoadCurve) *curve {
	cv := &curve{refPrompt: float64(c.PromptTokens), slope: c.TTFTPerPromptTokenUS * 1e3}
	for _, l := range c.Levels {
		cv.n = append(cv.n, float64(l.InFlight))
		cv.ttft = append(cv.ttft, toNS(l.TTFT))
		cv.itl = append(cv.itl, toNS(l.ITL))
	}
	return cv
}

func toNS(q Quantiles) [nQuantiles]float64 {
	var out [nQuantiles]float64
	for i, d := range q.Values() {
		out[i] = float64(d)
	}
	return out
}

// at returns the quantiles of table at in-flight count n.
func (c *curve) at(table [][nQuantiles]float64, n int) [nQuantiles]float64 {
	x := float64(n)
	k := len(c.n)
	if k == 1 || x <= c.n[0] {
		return table[0]
	}
	var out [nQuantiles]float64
	if x >= c.n[k-1] {
		dx := c.n[k-1] - c.n[k-2]
		for i := range out {
			slope := max(0, (table[k-1][i]-table[k-2][i])/dx)
			out[i] = table[k-1][i] + slope*(x-c.n[k-1])
			if i > 0 {
				out[i] = max(out[i], out[i-1])
			}
		}
		return out
	}
	j := 1
	for c.n[j] < x {
		j++
	}
	w := (x - c.n[j-1]) / (c.n[j] - c.n[j-1])
	for i := range out {
		out[i] = (1-w)*table[j-1][i] + w*table[j][i]
	}
	return out
}

// draw returns the inverse CDF of q at u in [0, 1).
func draw(q *[nQuantiles]float64, u float64) float64 {
	if u <= QuantileLevels[0] {
		return q[0]
	}
	for i := 1; i < nQuantiles; i++ {
		if u <= QuantileLevels[i] {
			lo := QuantileLevels[i-1]
			w := (u - lo) / (QuantileLevels[i] - lo)
			return q[i-1] + w*(q[i]-q[i-1])
		}
	}
	return q[nQuantiles-1]
}

// ttftAt draws a TTFT at in-flight count n for a prompt of the given length.
func (c *curve) ttftAt(n, prompt int, u float64) time.Duration {
	q := c.at(c.ttft, n)
	d := draw(&q, u) + c.slope*(float64(prompt)-c.refPrompt)
	return time.Duration(math.Round(max(0, d)))
}

// itlAt draws one inter-token gap at in-flight count n.
func (c *curve) itlAt(n int, u float64) time.Duration {
	q := c.at(c.itl, n)
	return time.Duration(math.Round(max(0, draw(&q, u))))
}

// unitFloat maps 64 random bits to [0, 1) without a rand.Rand (which a
// stream would have to allocate).
func unitFloat(bits uint64) float64 { return float64(bits>>11) / (1 << 53) }

// check reports whether v's bounds are non-negative and ordered.
func (v Validity) check() bool {
	ordered := func(lo, hi int) bool { return lo >= 0 && hi >= 0 && (hi == 0 || lo <= hi) }
	return ordered(v.MinInFlight, v.MaxInFlight) && ordered(v.MinPromptTokens, v.MaxPromptTokens)
}
