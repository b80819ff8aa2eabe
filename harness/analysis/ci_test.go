package analysis

import (
	"math"
	"testing"
)

func TestMinSamples(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p, conf float64
		want    int
	}{
		{50, 0.95, 6},      // ln(0.025)/ln(0.5) = 5.32
		{95, 0.95, 72},     // ln(0.025)/ln(0.95) = 71.9
		{99, 0.95, 368},    // ln(0.025)/ln(0.99) = 367.04: "P99 needs hundreds"
		{99.9, 0.95, 3688}, // ln(0.025)/ln(0.999) = 3687.03: "P99.9 thousands"
		{1, 0.95, 368},     // the lower tail mirrors the upper
		{99, 0.99, 528},    // ln(0.005)/ln(0.99) = 527.18
	}
	for _, c := range cases {
		if got := MinSamples(c.p, c.conf); got != c.want {
			t.Errorf("MinSamples(%v, %v) = %d, want %d", c.p, c.conf, got, c.want)
		}
	}
}

func TestRankBounds(t *testing.T) {
	t.Parallel()
	// Expected ranks and coverage computed with exact binomial sums
	// (Python math.comb) by the same rule: each tail ≤ α/2.
	cases := []struct {
		n        int
		p        float64
		lo, hi   int
		coverage float64
		ok       bool
	}{
		{100, 50, 40, 61, 0.9648, true},    // the textbook median interval (Conover)
		{6, 50, 1, 6, 0.96875, true},       // smallest n with a two-sided median interval
		{5, 50, 1, 5, 0.9375, false},       // one short: coverage below 95 %
		{1000, 99, 983, 997, 0.9761, true}, // P99 of a thousand samples
		{368, 99, 360, 368, 0.9624, true},  // exactly MinSamples(99)
		{367, 99, 359, 367, 0.9624, false}, // one below MinSamples(99): open above
		{200, 95, 184, 197, 0.9672, true},  // P95 of two hundred
		{10, 90, 7, 10, 0.6385, false},     // P90 of ten: hopeless
	}
	for _, c := range cases {
		lo, hi, cov, ok := RankBounds(c.n, c.p, 0.95)
		if lo != c.lo || hi != c.hi || ok != c.ok || math.Abs(cov-c.coverage) > 1e-4 {
			t.Errorf("RankBounds(%d, %v) = %d, %d, %.4f, %v; want %d, %d, %.4f, %v",
				c.n, c.p, lo, hi, cov, ok, c.lo, c.hi, c.coverage, c.ok)
		}
	}
}

// TestRankBoundsAgreesWithMinSamples checks the two derivations of
// adequacy agree at the boundary for many percentiles.
func TestRankBoundsAgreesWithMinSamples(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{50, 75, 90, 95, 99, 99.5, 99.9} {
		m := MinSamples(p, 0.95)
		if _, _, _, ok := RankBounds(m, p, 0.95); !ok {
			t.Errorf("P%v: n = MinSamples = %d not adequate", p, m)
		}
		if _, _, _, ok := RankBounds(m-1, p, 0.95); ok {
			t.Errorf("P%v: n = MinSamples−1 = %d adequate", p, m-1)
		}
	}
}

func TestPercentileCI(t *testing.T) {
	t.Parallel()
	// 1..100 shuffled deterministically: order statistics equal their rank.
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64((i*37)%100 + 1)
	}
	cases := []struct {
		p             float64
		value, lo, hi float64
		adequate      bool
	}{
		{50, 50, 40, 61, true},   // the median and its rank interval
		{99, 99, 97, 100, false}, // 100 samples cannot bound P99 from above
	}
	for _, c := range cases {
		iv, err := PercentileCI(v, c.p, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if iv.Value != c.value || iv.Lo != c.lo || iv.Hi != c.hi || iv.Adequate != c.adequate {
			t.Errorf("P%v: got value %v [%v, %v] adequate %v; want %v [%v, %v] %v",
				c.p, iv.Value, iv.Lo, iv.Hi, iv.Adequate, c.value, c.lo, c.hi, c.adequate)
		}
	}
	if v[0] != 1 {
		t.Errorf("PercentileCI modified its input")
	}
	if _, err := PercentileCI(v, 100, 0.95); err == nil {
		t.Error("P100 accepted")
	}
	if _, err := PercentileCI(v, 50, 1); err == nil {
		t.Error("confidence 1 accepted")
	}
	if iv, _ := PercentileCI(nil, 50, 0.95); iv.N != 0 || iv.Adequate {
		t.Errorf("empty sample: %+v", iv)
	}
}

func BenchmarkRankBounds(b *testing.B) {
	for b.Loop() {
		RankBounds(100_000, 99.9, 0.95)
	}
}

// TestNormalRankBounds checks the large-sample approximation against the
// exact binomial at the size where RankBounds switches between them.
func TestNormalRankBounds(t *testing.T) {
	t.Parallel()
	const n = exactRankLimit
	for _, p := range []float64{50, 90, 99, 99.9} {
		lo, hi, cov, ok := RankBounds(n, p, 0.95)
		alo, ahi, acov, aok := normalRankBounds(n, p/100, 0.025)
		if abs(lo-alo) > 2 || abs(hi-ahi) > 2 || ok != aok || math.Abs(cov-acov) > 0.01 {
			t.Errorf(
				"P%v at n=%d: exact %d, %d (%.4f, %v); normal %d, %d (%.4f, %v)",
				p,
				n,
				lo,
				hi,
				cov,
				ok,
				alo,
				ahi,
				acov,
				aok,
			)
		}
	}
	// Far beyond the table: ranks straddle n·p, coverage ≈ 95 %.
	lo, hi, cov, ok := RankBounds(500_000_000, 99, 0.95)
	if !ok || lo >= 495_000_000 || hi <= 495_000_000 || math.Abs(cov-0.95) > 0.01 {
		t.Errorf("n=5e8 P99: %d, %d, %.4f, %v", lo, hi, cov, ok)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
