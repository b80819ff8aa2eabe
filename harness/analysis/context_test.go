package analysis

import (
	"math"
	"testing"
)

func TestBendOf(t *testing.T) {
	t.Parallel()
	buckets := []float64{2048, 4096, 8192, 16384, 32768}
	curve := func(f func(x float64) float64) []ContextPoint {
		p := make([]ContextPoint, len(buckets))
		for i, x := range buckets {
			p[i] = ContextPoint{Tokens: x, TTFTMS: f(x), N: 30}
		}
		return p
	}
	cases := []struct {
		name    string
		pts     []ContextPoint
		bend    float64 // -1: none
		msPer1K float64
	}{
		// Linear prefill, 17.25 µs/token (the H100 β1) plus 6 ms overhead: no bend.
		{"linear", curve(func(x float64) float64 { return 6 + 0.01725*x }), -1, 17.25},
		// Quadratic attention: against the least-squares line through 2K, 4K
		// and 8K (26.32 µs/token), 16K is 16.5 % above, 32K 52 % above: the
		// bend is 16K.
		{"quadratic", curve(func(x float64) float64 { return 6 + 0.02*x + 0.0000006*x*x }), 16384, 26.3195},
		// Noise of a few ms on short buckets steepens one segment ×1.9 but
		// leaves every bucket within 25 % of the line (+11 %, +20 %): no bend.
		{
			"noisy short buckets",
			[]ContextPoint{{1024, 12.0, 8}, {2048, 13.0, 8}, {4096, 16.7, 8}, {8192, 22.7, 8}},
			-1,
			0.9766,
		},
		// A wall past 16K (300 ms on 661 ms of linear prefill): 45 % excess.
		{"late wall", curve(func(x float64) float64 {
			if x > 16384 {
				return 6 + 0.02*x + 300
			}
			return 6 + 0.02*x
		}), 16384, 20},
	}
	for _, c := range cases {
		got := BendOf("t", c.pts, 0)
		if val(got.Bend) != c.bend || math.Abs(got.MSPer1K-c.msPer1K) > 1e-4 {
			t.Errorf("%s: bend %v, ms/1K %.4f; want %v, %.4f", c.name, val(got.Bend), got.MSPer1K, c.bend, c.msPer1K)
		}
	}
	if c := BendOf("t", curve(func(x float64) float64 { return 10 })[:1], 0); c.Bend != nil || c.MSPer1K != 0 {
		t.Errorf("single bucket: %+v", c)
	}
}

func TestCompareColdWarm(t *testing.T) {
	t.Parallel()
	warm := make([]float64, 50)
	for i := range warm {
		warm[i] = 100 + float64(i%5)
	}
	cold := []float64{2100, 2090, 2110, 2105, 2095, 2102, 2098, 2101, 2099, 2104}
	cases := []struct {
		name        string
		cold, warm  []float64
		delta       float64
		significant bool
	}{
		{"2 s load time", cold, warm, 2100 - 102, true},             // medians 2100 and 102
		{"no penalty", warm[:10], warm, 0, false},                   // same distribution
		{"too few cold samples", cold[:3], warm, 2100 - 102, false}, // 3 samples cannot bound a median
	}
	for _, c := range cases {
		got := CompareColdWarm("t", c.cold, c.warm)
		if got.DeltaMS != c.delta || got.Significant != c.significant {
			t.Errorf(
				"%s: delta %v significant %v; want %v %v",
				c.name,
				got.DeltaMS,
				got.Significant,
				c.delta,
				c.significant,
			)
		}
	}
}
