package history

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPut stores a two-step run (12 requests a step) in SQLite: the
// cost a finished run adds to `testbed run`. Most of it is encoding the
// steps' HDR histograms.
func BenchmarkPut(b *testing.B) {
	r, err := FromDir(mockRun(b, 2*time.Millisecond, time.Millisecond, 12), "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "h.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	i := 0
	for b.Loop() {
		r.ID = fmt.Sprint("bench-", i)
		i++
		if _, err := s.Put(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}
