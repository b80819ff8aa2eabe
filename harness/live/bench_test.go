package live

import (
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

// BenchmarkObserve is the writer goroutine's cost per record with
// --metrics-addr: a streamed request of 128 tokens.
func BenchmarkObserve(b *testing.B) {
	e := New()
	rec := results.Record{Target: "mock", IntendedNS: 1e6, SentNS: 1.05e6, FirstTokenNS: 101e6, LastTokenNS: 1371e6,
		DoneNS: 1372e6, NOut: 128, ChunkGapsNS: make([]int64, 127)}
	for i := range rec.ChunkGapsNS {
		rec.ChunkGapsNS[i] = 10e6
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Observe(&rec)
	}
}
