package harness

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestPartition: for every split, the shards own each request index
// exactly once, their shares of workers sum to the concurrency, and
// global/count agree with owns.
func TestPartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		concurrency int
		rate        float64
		shards      int
		total       int
	}{
		{"closed loop, even split", 8, 0, 4, 100},
		{"closed loop, remainder to the first shards", 10, 0, 4, 97},
		{"closed loop, one shard owns everything", 5, 0, 1, 33},
		{"closed loop, as many shards as workers", 3, 0, 3, 10},
		{"open loop, round robin", 0, 20, 4, 101},
		{"open loop, more shards than requests", 0, 5, 7, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := Step{Concurrency: tt.concurrency, Rate: tt.rate}
			owner := make([]int, tt.total)
			workers := 0
			for i := range tt.shards {
				p := partOf(&st, i, tt.shards)
				workers += p.workers()
				n := 0
				for g := range tt.total {
					if p.owns(g) {
						owner[g]++
						if got := p.global(n); got != g {
							t.Errorf("shard %d: global(%d) = %d, want %d", i, n, got, g)
						}
						n++
					}
				}
				if c := p.count(tt.total); c != n {
					t.Errorf("shard %d: count = %d, owns %d", i, c, n)
				}
			}
			for g, n := range owner {
				if n != 1 {
					t.Errorf("request %d owned by %d shards", g, n)
				}
			}
			if tt.rate == 0 && workers != tt.concurrency {
				t.Errorf("workers sum to %d, want %d", workers, tt.concurrency)
			}
		})
	}
}

// TestParseShard: the forms users type, and clear errors for the rest.
func TestParseShard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Shard
		ok   bool
	}{
		{"0/4", Shard{Index: 0, Count: 4}, true},      // the first of four
		{"3/4", Shard{Index: 3, Count: 4}, true},      // the last of four
		{"auto/2", Shard{Count: 2, Auto: true}, true}, // the coordinator assigns it
		{" 1/2 ", Shard{Index: 1, Count: 2}, true},    // spaces around are fine
		{"4/4", Shard{}, false},                       // indices run from 0
		{"-1/4", Shard{}, false},                      // negative
		{"1", Shard{}, false},                         // no count
		{"1/0", Shard{}, false},                       // no shards
		{"a/b", Shard{}, false},                       // not numbers
	}
	for _, tt := range tests {
		got, err := ParseShard(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseShard(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseShard(f *testing.F) {
	for _, s := range []string{"0/4", "auto/3", "9/10", "x", "1/", "/1", "2/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sh, err := ParseShard(s)
		if err != nil {
			return
		}
		if sh.Count < 1 || (!sh.Auto && (sh.Index < 0 || sh.Index >= sh.Count)) {
			t.Fatalf("ParseShard(%q) = %+v: out of range", s, sh)
		}
		if back, err := ParseShard(sh.String()); err != nil || back != sh {
			t.Fatalf("round trip of %q: %+v, %v", s, back, err)
		}
	})
}

// TestCoordinatorBarrier: auto indices are handed out once each, and every
// shard leaves a step's barrier with one agreed start, after the last
// arrival.
func TestCoordinatorBarrier(t *testing.T) {
	t.Parallel()
	const n = 3
	c, err := NewCoordinator(n, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clients := make([]*coordClient, n)
	seen := map[int]bool{}
	for i := range n {
		s := &Shard{Count: n, Auto: true, Coordinator: srv.URL}
		cl, err := joinCoordinator(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if seen[s.Index] || cl.info.Group != c.Group() {
			t.Fatalf("join %d: index %d (seen %v), group %q", i, s.Index, seen, cl.info.Group)
		}
		seen[s.Index] = true
		clients[i] = cl
	}
	if _, err := joinCoordinator(ctx, &Shard{Count: n, Auto: true, Coordinator: srv.URL}); err == nil {
		t.Error("a fourth shard joined a coordinator of three")
	}
	var wg sync.WaitGroup
	last := time.Now()
	for i, cl := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 20 * time.Millisecond) // arrive one after another
			cl.waitStep(ctx, 0)
		})
	}
	wg.Wait()
	agreed := clients[0].info.Steps[0].Agreed
	for _, cl := range clients {
		ss := cl.info.Steps[0]
		if ss.Unsynced != "" || !ss.Agreed.Equal(agreed) {
			t.Errorf("shard %d: step %+v, want the agreed start %v", cl.info.Index, ss, agreed)
		}
		if ss.Start.Before(agreed) {
			t.Errorf("shard %d started %v before the agreed start", cl.info.Index, agreed.Sub(ss.Start))
		}
	}
	if lastArrival := last.Add(2 * 20 * time.Millisecond); agreed.Before(lastArrival) {
		t.Errorf("agreed start %v is before the last shard arrived (%v)", agreed, lastArrival)
	}
	for _, cl := range clients {
		if err := cl.done(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("coordinator not done after every shard finished")
	}
}
