package analysis

import (
	"math"
	"sort"
)

// ContextPoint is one long-context bucket: the prompt length and the TTFT
// measured for it (P50 is the robust choice; the caller decides).
type ContextPoint struct {
	Tokens float64 // input tokens of the bucket
	TTFTMS float64
	N      int // samples behind TTFTMS
}

// ContextCurve is the analysis of TTFT against prompt length for one target.
type ContextCurve struct {
	Target string         `json:"target"`
	Points []ContextPoint `json:"points"`
	// MSPer1K is the marginal cost of prompt tokens on the shorter buckets:
	// TTFT added per 1,000 prompt tokens, from a least-squares line through
	// the shorter half of the buckets (≈ prefill speed).
	MSPer1K float64 `json:"ms_per_1k_tokens"`
	// PrefillTokensPerS is the prefill rate that line implies; 0 when TTFT
	// did not grow measurably with prompt length.
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	// Bend is the last bucket before the curve turns superlinear: the first
	// bucket whose TTFT exceeds that line, extrapolated, by more than
	// BendExcess comes right after it. Nil when TTFT stays (close to)
	// linear over every bucket.
	Bend *float64 `json:"bend_tokens"`
	// Excess is the largest relative excess over that line, e.g. 0.4 when
	// the longest bucket took 40 % longer than linear prefill predicts.
	Excess float64 `json:"excess"`
	// SlopeRatio is the largest per-token slope between adjacent buckets,
	// relative to the first segment's.
	SlopeRatio float64 `json:"slope_ratio"`
}

// DefaultBendExcess: a bucket whose TTFT is 25 % above the line fitted to
// the shorter buckets marks the bend. Prefill is linear in prompt length
// until attention's quadratic term, chunked-prefill queueing or KV-cache
// pressure take over. Measuring the excess against the whole TTFT, not the
// slope between neighbours, keeps a few milliseconds of noise on short
// buckets from passing for a regime change.
const DefaultBendExcess = 0.25

// BendOf analyses a long-context curve. Points need not be sorted.
func BendOf(target string, pts []ContextPoint, bendExcess float64) ContextCurve {
	if bendExcess <= 0 {
		bendExcess = DefaultBendExcess
	}
	p := append([]ContextPoint(nil), pts...)
	sort.Slice(p, func(i, j int) bool { return p[i].Tokens < p[j].Tokens })
	c := ContextCurve{Target: target, Points: p}
	if len(p) < 2 {
		return c
	}
	sl := func(i int) float64 { // per-token slope of segment i-1 → i
		return (p[i].TTFTMS - p[i-1].TTFTMS) / (p[i].Tokens - p[i-1].Tokens)
	}
	// The reference line: least squares through the shorter half (at least
	// two buckets), so one noisy short bucket does not tilt it.
	k := max(2, (len(p)+1)/2)
	slope, icept := fitLine(p[:k])
	if !(slope > 0) || math.IsInf(slope, 0) {
		return c // TTFT does not grow with prompt length: nothing to bend
	}
	c.MSPer1K = slope * 1000
	c.PrefillTokensPerS = 1e6 / c.MSPer1K
	if s0 := sl(1); s0 > 0 {
		c.SlopeRatio = 1
		for i := 2; i < len(p); i++ {
			c.SlopeRatio = math.Max(c.SlopeRatio, sl(i)/s0)
		}
	}
	for i := k; i < len(p); i++ {
		line := icept + slope*p[i].Tokens
		if line <= 0 {
			continue
		}
		ex := p[i].TTFTMS/line - 1
		c.Excess = math.Max(c.Excess, ex)
		if ex > bendExcess && c.Bend == nil {
			c.Bend = ptr(p[i-1].Tokens)
		}
	}
	return c
}

// fitLine returns the least-squares line TTFT = icept + slope·tokens.
func fitLine(p []ContextPoint) (slope, icept float64) {
	var mx, my float64
	for _, q := range p {
		mx += q.Tokens
		my += q.TTFTMS
	}
	n := float64(len(p))
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for _, q := range p {
		sxy += (q.Tokens - mx) * (q.TTFTMS - my)
		sxx += (q.Tokens - mx) * (q.Tokens - mx)
	}
	if sxx == 0 {
		return math.NaN(), math.NaN()
	}
	slope = sxy / sxx
	return slope, my - slope*mx
}
