package gamma

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Gamma(k, 1) has mean k and variance k; both branches (k < 1 boosted,
// k ≥ 1 direct) are checked on a fixed seed.
func TestDrawMoments(t *testing.T) {
	t.Parallel()
	for _, k := range []float64{0.25, 0.5, 1, 3, 40} {
		r := rand.New(rand.NewPCG(7, uint64(k*100)))
		const n = 200_000
		var sum, sq float64
		for range n {
			x := Draw(r, k)
			if x < 0 || math.IsNaN(x) {
				t.Fatalf("k=%v: draw %v", k, x)
			}
			sum += x
			sq += x * x
		}
		mean := sum / n
		variance := sq/n - mean*mean
		if math.Abs(mean-k) > 0.02*k+0.01 || math.Abs(variance-k) > 0.05*k+0.01 {
			t.Errorf("k=%v: mean %.4f variance %.4f, want %v and %v", k, mean, variance, k, k)
		}
	}
}
