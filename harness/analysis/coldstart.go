package analysis

import "math"

// ColdWarm compares TTFT after an idle period (cold) with TTFT of a warm
// server, for one target.
type ColdWarm struct {
	Target  string   `json:"target"`
	ColdN   int      `json:"cold_n"`
	WarmN   int      `json:"warm_n"`
	ColdP50 float64  `json:"cold_p50_ms"`
	WarmP50 float64  `json:"warm_p50_ms"`
	ColdMax float64  `json:"cold_max_ms"`
	DeltaMS float64  `json:"delta_p50_ms"` // ColdP50 − WarmP50
	Ratio   float64  `json:"ratio"`        // ColdP50 / WarmP50
	ColdCI  Interval `json:"cold_p50_ci"`
	WarmCI  Interval `json:"warm_p50_ci"`
	// Significant is true when both medians have a two-sided confidence
	// interval and the intervals do not overlap: the cold penalty is real,
	// not sampling noise.
	Significant bool `json:"significant"`
}

// CompareColdWarm computes the cold-start penalty from two TTFT samples (ms).
func CompareColdWarm(target string, cold, warm []float64) ColdWarm {
	c := ColdWarm{Target: target, ColdN: len(cold), WarmN: len(warm)}
	// PercentileCI fails only on a percentile or confidence out of range,
	// and both are constants here.
	c.ColdCI, _ = PercentileCI(cold, 50, DefaultConfidence)
	c.WarmCI, _ = PercentileCI(warm, 50, DefaultConfidence)
	c.ColdP50, c.WarmP50 = c.ColdCI.Value, c.WarmCI.Value
	for _, v := range cold {
		c.ColdMax = math.Max(c.ColdMax, v)
	}
	c.DeltaMS = c.ColdP50 - c.WarmP50
	if c.WarmP50 > 0 {
		c.Ratio = c.ColdP50 / c.WarmP50
	}
	c.Significant = c.ColdCI.Adequate && c.WarmCI.Adequate &&
		(c.ColdCI.Lo > c.WarmCI.Hi || c.WarmCI.Lo > c.ColdCI.Hi)
	return c
}
