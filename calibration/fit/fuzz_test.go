package fit

import (
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

// FuzzFit drives the reconstruction and the fit with arbitrary timings:
// whatever the records, Fit returns a valid profile or an error, never
// panics (the burst index arithmetic is the risk).
func FuzzFit(f *testing.F) {
	f.Add([]byte{1, 10, 3, 5, 5, 5, 2, 40, 7, 7, 1, 3, 200, 9, 9, 9, 9})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var recs []results.Record
		for i := 0; i+3 < len(b) && len(recs) < 64; {
			n := int(b[i]%8) + 1
			r := results.Record{ID: "r", Target: "t", Stream: true, Concurrency: int(b[i+1]%4) + 1,
				SentNS: int64(b[i+1]) * 1000, NIn: int(b[i+2]) + 1}
			r.FirstTokenNS = r.SentNS + int64(b[i+3])*1000 + 1
			i += 4
			for j := 1; j < n && i < len(b); j++ {
				r.ChunkGapsNS = append(r.ChunkGapsNS, int64(b[i])*1000)
				i++
			}
			r.NOut = len(r.ChunkGapsNS) + 1
			r.NOutCounted = r.NOut
			recs = append(recs, r)
		}
		res, err := Records(recs)
		if err != nil {
			return
		}
		if verr := res.Profile.Validate(); verr != nil {
			t.Fatalf("Fit returned an invalid profile: %v", verr)
		}
	})
}
