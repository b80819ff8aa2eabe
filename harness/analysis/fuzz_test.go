package analysis

import (
	"math"
	"testing"
)

// FuzzFindKnee feeds arbitrary ladders to the knee finder: it must never
// panic, and every load it names must be one of the ladder's loads.
func FuzzFindKnee(f *testing.F) {
	f.Add(1.0, 100.0, 20.0, 8.0, 800.0, 21.0, 32.0, 3200.0, 25.0, 48.0, 3210.0, 900.0)
	f.Add(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Add(math.Inf(1), math.NaN(), -1.0, 2.0, 2.0, 2.0, 2.0, -5.0, 1e300, 3.0, 1e-300, 7.0)
	f.Fuzz(func(t *testing.T, l1, t1, p1, l2, t2, p2, l3, t3, p3, l4, t4, p4 float64) {
		pts := []LadderPoint{
			{Load: l1, Throughput: t1, TTFTP99: p1, E2EP99: p1 * 3, MeetsSLO: true},
			{Load: l2, Throughput: t2, TTFTP99: p2, E2EP99: p2 * 3, MeetsSLO: true},
			{Load: l3, Throughput: t3, TTFTP99: p3, E2EP99: p3 * 3},
			{Load: l4, Throughput: t4, TTFTP99: p4, E2EP99: p4 * 3, MeetsSLO: true},
		}
		k := FindKnee("t", LadderConcurrency, pts, KneeOptions{})
		for _, v := range []*float64{k.ThroughputKnee, k.LatencyKnee, k.LatencyElbow, k.BestOperatingPoint} {
			if v == nil {
				continue
			}
			found := false
			for _, p := range pts {
				if p.Load == *v || (math.IsNaN(p.Load) && math.IsNaN(*v)) {
					found = true
				}
			}
			if !found {
				t.Fatalf("knee at %v is not a ladder load: %+v", *v, k)
			}
		}
	})
}

// FuzzRankBounds checks the order-statistic interval for any n and p: ranks
// in [1, n], lo ≤ hi, coverage a probability, and at least the confidence
// asked for whenever the interval is called adequate.
func FuzzRankBounds(f *testing.F) {
	f.Add(100, 50.0)
	f.Add(1, 99.9)
	f.Add(5000, 99.9)
	f.Fuzz(func(t *testing.T, n int, p float64) {
		if n < 1 || n > 20000 || !(p > 0 && p < 100) {
			return
		}
		lo, hi, cov, ok := RankBounds(n, p, 0.95)
		if lo < 1 || hi > n || lo > hi || cov < -1e-9 || cov > 1+1e-9 || math.IsNaN(cov) {
			t.Fatalf("RankBounds(%d, %v) = %d, %d, %v, %v", n, p, lo, hi, cov, ok)
		}
		if ok && cov < 0.95-1e-9 {
			t.Fatalf("RankBounds(%d, %v): adequate with coverage %v", n, p, cov)
		}
	})
}
