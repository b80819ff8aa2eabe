package analysis

import (
	"fmt"
	"math"
	"sort"
)

// DefaultConfidence is the coverage of the percentile confidence intervals
// the report prints.
const DefaultConfidence = 0.95

// Interval is a distribution-free confidence interval for one percentile,
// bounded by two order statistics of the sample. Lo and Hi are the sample
// values at the 1-based ranks LoRank and HiRank. When the sample is too small
// for a two-sided interval at the requested confidence, Adequate is false and
// the missing side is reported as the sample's extreme (so the interval is
// open on that side: the true percentile may lie beyond every value seen).
type Interval struct {
	Percentile float64 `json:"percentile"` // 0..100
	Confidence float64 `json:"confidence"` // e.g. 0.95
	N          int     `json:"n"`
	Value      float64 `json:"value"` // the sample percentile (nearest rank)
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	LoRank     int     `json:"lo_rank"`
	HiRank     int     `json:"hi_rank"`
	Coverage   float64 `json:"coverage"`    // exact binomial coverage of [LoRank, HiRank]
	Adequate   bool    `json:"adequate"`    // a two-sided interval exists at Confidence
	MinSamples int     `json:"min_samples"` // smallest n for which it would
}

// MinSamples is the smallest sample size for which a two-sided
// distribution-free confidence interval of the given coverage exists for the
// p-th percentile (p in 0..100): the upper bound needs the sample maximum to
// exceed the true percentile with probability at least 1-α/2, which holds
// once 1-(p/100)^n ≥ 1-α/2. For 95 % coverage this is 6 samples for P50, 72
// for P95, 368 for P99 and 3,688 for P99.9 — "P99 needs hundreds, P99.9
// thousands" made exact. The lower side is symmetric for p below 50.
func MinSamples(p, confidence float64) int {
	q := p / 100
	if q < 0.5 {
		q = 1 - q
	}
	if q <= 0 || q >= 1 || confidence <= 0 || confidence >= 1 {
		return 0
	}
	alpha := (1 - confidence) / 2
	return int(math.Ceil(math.Log(alpha) / math.Log(q)))
}

// RankBounds returns the 1-based ranks lo ≤ hi of the order statistics
// X(lo), X(hi) that bound the p-th percentile (p in 0..100) of a sample of n
// with at least the given confidence, and the exact coverage
// P(X(lo) ≤ ξp ≤ X(hi)) = F(hi−1) − F(lo−1), F the Binomial(n, p) CDF.
// Each tail is held to at most α/2. ok is false when n is too small for one
// side; that side is then clamped to rank 1 or n.
func RankBounds(n int, p, confidence float64) (lo, hi int, coverage float64, ok bool) {
	if n <= 0 {
		return 0, 0, 0, false
	}
	q := p / 100
	alpha := (1 - confidence) / 2
	if n > exactRankLimit {
		return normalRankBounds(n, q, alpha)
	}
	cdf := binomialCDF(n, q)
	// lo: the largest rank with P(Bin ≤ lo−1) ≤ α/2.
	lo = 0
	for k := 1; k <= n; k++ {
		if cdf(k-1) <= alpha {
			lo = k
		} else {
			break
		}
	}
	// hi: the smallest rank with P(Bin ≤ hi−1) ≥ 1−α/2.
	hi = n + 1
	for k := max(lo, 1); k <= n; k++ {
		if cdf(k-1) >= 1-alpha {
			hi = k
			break
		}
	}
	ok = lo >= 1 && hi <= n
	lo = max(lo, 1)
	hi = min(hi, n)
	return lo, hi, cdf(hi-1) - cdf(lo-1), ok
}

// binomialCDF returns k ↦ P(Binomial(n, q) ≤ k). It tabulates the PMF once in
// log space by the ratio recurrence: O(n), no overflow for any n a
// benchmark produces.
func binomialCDF(n int, q float64) func(k int) float64 {
	cum := make([]float64, n+1)
	switch {
	case q <= 0:
		for k := range cum {
			cum[k] = 1
		}
	case q >= 1:
		cum[n] = 1
	default:
		// log pmf(k+1) = log pmf(k) + log((n−k)/(k+1)) + log(q/(1−q)).
		lq, l1q := math.Log(q), math.Log1p(-q)
		lp := float64(n) * l1q
		s := 0.0
		for k := 0; k <= n; k++ {
			s += math.Exp(lp)
			cum[k] = min(s, 1)
			lp += math.Log(float64(n-k)/float64(k+1)) + lq - l1q
		}
	}
	return func(k int) float64 {
		switch {
		case k < 0:
			return 0
		case k >= n:
			return 1
		}
		return cum[k]
	}
}

// Percentile is the nearest-rank p-th percentile (p in 0..100) of an
// ascending sample: the value at rank ⌈p/100·n⌉, so it is always a value that
// was observed. It returns NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	r := int(math.Ceil(p / 100 * float64(n)))
	r = min(max(r, 1), n)
	return sorted[r-1]
}

// Quantile is the q-th quantile (q in 0..1) of v by linear interpolation
// between the closest ranks. It sorts v in place; an empty v gives 0.
func Quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	pos := q * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return v[lo] + (v[hi]-v[lo])*(pos-float64(lo))
}

// PercentileCI computes the sample percentile and its distribution-free
// confidence interval. values need not be sorted; they are not modified.
func PercentileCI(values []float64, p, confidence float64) (Interval, error) {
	if p <= 0 || p >= 100 {
		return Interval{}, fmt.Errorf("analysis: percentile %v outside (0, 100)", p)
	}
	if confidence <= 0 || confidence >= 1 {
		return Interval{}, fmt.Errorf("analysis: confidence %v outside (0, 1)", confidence)
	}
	iv := Interval{Percentile: p, Confidence: confidence, N: len(values), MinSamples: MinSamples(p, confidence)}
	if len(values) == 0 {
		return iv, nil // N == 0 says it; NaN would not survive encoding/json
	}
	s := sortedCopy(values)
	iv.Value = Percentile(s, p)
	iv.LoRank, iv.HiRank, iv.Coverage, iv.Adequate = RankBounds(len(s), p, confidence)
	iv.Lo, iv.Hi = s[iv.LoRank-1], s[iv.HiRank-1]
	return iv, nil
}

func sortedCopy(v []float64) []float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s
}

// exactRankLimit is the sample size up to which RankBounds sums the
// binomial exactly (O(n) time and memory); beyond it the normal
// approximation, with continuity correction, is accurate to a rank or two
// in millions and needs no table (ITL samples reach hundreds of millions).
const exactRankLimit = 100_000

// normalRankBounds is RankBounds by the normal approximation of
// Binomial(n, q).
func normalRankBounds(n int, q, alpha float64) (lo, hi int, coverage float64, ok bool) {
	mean := float64(n) * q
	sd := math.Sqrt(float64(n) * q * (1 - q))
	z := math.Sqrt2 * math.Erfinv(1-2*alpha)
	// P(Bin ≤ k) ≈ Φ((k + 0.5 − mean)/sd): lo−1 is the largest k with that
	// ≤ α, hi−1 the smallest with that ≥ 1−α.
	lo = int(math.Floor(mean-z*sd-0.5)) + 1
	hi = int(math.Ceil(mean+z*sd-0.5)) + 1
	ok = lo >= 1 && hi <= n
	lo, hi = max(lo, 1), min(max(hi, lo), n)
	phi := func(k int) float64 { // ≈ P(Bin ≤ k)
		if sd == 0 {
			if float64(k) >= mean {
				return 1
			}
			return 0
		}
		return 0.5 * math.Erfc(-(float64(k)+0.5-mean)/(sd*math.Sqrt2))
	}
	return lo, hi, phi(hi-1) - phi(lo-1), ok
}
