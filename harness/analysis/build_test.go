package analysis

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestIntervalHist checks that intervals read from the ITL histogram match
// the exact order statistics to the histogram's precision (3 digits).
func TestIntervalHist(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	v := make([]float64, 5000)
	h := hdrhistogram.New(1, itlMaxUS, 3)
	for i := range v {
		us := int64(math.Exp(r.NormFloat64()*0.5+math.Log(20_000))) + 1 // lognormal around 20 ms
		v[i] = float64(us) / 1e3
		_ = h.RecordValue(us)
	}
	s := sortedCopy(v)
	for _, p := range ReportedPercentiles {
		want, got := intervalSorted(s, p, 0.95), intervalHist(h, p, 0.95)
		close := func(a, b float64) bool { return math.Abs(a-b) <= 0.002*math.Abs(b)+0.001 }
		if !close(got.Value, want.Value) || !close(got.Lo, want.Lo) || !close(got.Hi, want.Hi) ||
			got.LoRank != want.LoRank || got.HiRank != want.HiRank || got.Adequate != want.Adequate {
			t.Errorf("P%v: histogram %+v, exact %+v", p, got, want)
		}
	}
}

// syntheticRecords builds n streamed records of k tokens each over a few
// concurrency steps, for the benchmark.
func syntheticRecords(n, k int) ([]results.StepSummary, []results.Record) {
	r := rand.New(rand.NewPCG(1, 2))
	conc := []int{1, 8, 32, 64}
	recs := make([]results.Record, n)
	for i := range recs {
		step := i % len(conc)
		gaps := make([]int64, k-1)
		for j := range gaps {
			gaps[j] = int64(8e6 + r.NormFloat64()*1e6)
		}
		sent := int64(i) * 1e6
		ft := sent + int64(50e6+r.Float64()*20e6)
		var sum int64
		for _, g := range gaps {
			sum += g
		}
		recs[i] = results.Record{
			ID:           "x",
			Target:       "t",
			Step:         step,
			Scenario:     harness.ScenarioConcurrency,
			Concurrency:  conc[step],
			Stream:       true,
			IntendedNS:   sent,
			SentNS:       sent,
			FirstByteNS:  ft,
			FirstTokenNS: ft,
			LastTokenNS:  ft + sum,
			DoneNS:       ft + sum,
			ChunkGapsNS:  gaps,
			NIn:          128,
			NOut:         k,
		}
	}
	return harness.Summarize(recs).Steps, recs
}

// BenchmarkAnalyze measures the analysis of a run: 20,000 requests of 256
// streamed tokens (5 million chunk gaps).
func BenchmarkAnalyze(b *testing.B) {
	steps, recs := syntheticRecords(20_000, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Analyze(steps, recs, Options{})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)*256), "ns/token")
}
