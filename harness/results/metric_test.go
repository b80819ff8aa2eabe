package results

import (
	"encoding/json"
	"math/rand/v2"
	"sort"
	"testing"
)

// A Metric survives its serialised form, and two halves merged equal the
// whole: the property sharded runs and run history rely on.
func TestMetricRoundTripAndMerge(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var whole, a, b Metric
	for i := range 5000 {
		ns := int64(rng.ExpFloat64() * 40e6) // exponential around 40 ms
		whole.Add(ns, 1)
		if i%3 == 0 {
			a.Add(ns, 1)
		} else {
			b.Add(ns, 1)
		}
	}
	buf, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	var back Metric
	if err := json.Unmarshal(buf, &back); err != nil {
		t.Fatal(err)
	}
	if back.Stats() != a.Stats() {
		t.Fatalf("round trip changed the stats:\n got %+v\nwant %+v", back.Stats(), a.Stats())
	}
	back.Merge(&b)
	got, want := back.Stats(), whole.Stats()
	if got.Count != want.Count || got.Min != want.Min || got.Max != want.Max ||
		got.P50 != want.P50 || got.P99 != want.P99 || got.P999 != want.P999 {
		t.Errorf("merged %+v, want %+v", got, want)
	}
	// Moments merge exactly up to floating-point rounding.
	if d := got.Mean - want.Mean; d > 1e-9 || d < -1e-9 {
		t.Errorf("merged mean %v, want %v", got.Mean, want.Mean)
	}
	if d := got.Stddev - want.Stddev; d > 1e-9 || d < -1e-9 {
		t.Errorf("merged stddev %v, want %v", got.Stddev, want.Stddev)
	}
	var empty Metric
	buf, err = json.Marshal(&empty)
	if err != nil || json.Unmarshal(buf, &empty) != nil || empty.Count() != 0 {
		t.Errorf("empty metric: %s, %v", buf, err)
	}
	if err := json.Unmarshal([]byte(`{"n":3,"hdr_us":"not base64"}`), &empty); err == nil {
		t.Error("a damaged histogram was accepted")
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var m Metric
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Add(int64(i%1000)*1e5, 1)
	}
}

// TestMetricBuckets: a quantile read off Buckets is the one Quantile gives.
func TestMetricBuckets(t *testing.T) {
	t.Parallel()
	var m Metric
	for i := int64(1); i <= 5000; i++ {
		m.Add(i*i*37, 1+i%3)
	}
	vals, cum := m.Buckets()
	if cum[len(cum)-1] != m.Count() {
		t.Fatalf("buckets hold %d samples, metric %d", cum[len(cum)-1], m.Count())
	}
	for _, p := range []float64{1, 50, 90, 99, 99.9} {
		rank := int64(p/100*float64(m.Count()) + 0.5)
		i := sort.Search(len(cum), func(i int) bool { return cum[i] >= rank })
		if vals[i] != m.Quantile(p) {
			t.Errorf("p%g: buckets give %g ms, Quantile %g ms", p, vals[i], m.Quantile(p))
		}
	}
}
