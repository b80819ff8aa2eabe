// Package gamma draws from the gamma distribution: the harness's bursty
// arrivals and the results store's bootstrap intervals both need it.
package gamma

import (
	"math"
	"math/rand/v2"
)

// Draw returns a draw from Gamma(shape, 1) by Marsaglia and Tsang's method;
// shape must be positive.
func Draw(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		// Boost: Gamma(a) = Gamma(a+1) * U^(1/a).
		return Draw(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
