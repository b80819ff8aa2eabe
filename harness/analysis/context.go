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
	// MSPer1K is the initial marginal cost: TTFT added per 1,000 prompt
	// tokens between the two shortest buckets (≈ prefill speed).
	MSPer1K float64 `json:"ms_per_1k_tokens"`
	// PrefillTokensPerS is 1,000 / MSPer1K × 1,000: the prefill rate the
	// initial slope implies.
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	// Bend is the last bucket before the curve turns superlinear: the first
	// bucket after which the per-token slope exceeds BendFactor × the initial
	// slope. Nil when TTFT stays (close to) linear over every bucket.
	Bend *float64 `json:"bend_tokens"`
	// SlopeRatio is the largest per-token slope seen, relative to the initial.
	SlopeRatio float64 `json:"slope_ratio"`
}

// DefaultBendFactor: a segment whose per-token TTFT cost is 1.5× the first
// segment's marks the bend. Prefill is linear in prompt length until
// attention's quadratic term, chunked-prefill queueing or KV-cache pressure
// take over, so a 50 % steeper slope is a regime change, not noise, at the
// dozens of samples per bucket the scenario takes.
const DefaultBendFactor = 1.5

// BendOf analyses a long-context curve. Points need not be sorted.
func BendOf(target string, pts []ContextPoint, bendFactor float64) ContextCurve {
	if bendFactor <= 1 {
		bendFactor = DefaultBendFactor
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
	s0 := sl(1)
	if !(s0 > 0) || math.IsInf(s0, 0) {
		return c
	}
	c.MSPer1K = s0 * 1000
	c.PrefillTokensPerS = 1e6 / c.MSPer1K
	c.SlopeRatio = 1
	for i := 2; i < len(p); i++ {
		r := sl(i) / s0
		c.SlopeRatio = math.Max(c.SlopeRatio, r)
		if r > bendFactor && c.Bend == nil {
			c.Bend = ptr(p[i-1].Tokens)
		}
	}
	return c
}
