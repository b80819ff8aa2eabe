package mockllm

import (
	"container/heap"
	"context"
	"sync"
	"testing"
	"time"
)

// TestWakerOrderAndCancel: waiters wake, never before their due time, in
// due order; a cancelled wait leaves no stale wake-up behind.
func TestWakerOrderAndCancel(t *testing.T) {
	t.Parallel()
	w := newWaker()
	defer w.close()
	base := time.Now()
	offsets := []time.Duration{3 * time.Millisecond, 100 * time.Microsecond, 2 * time.Millisecond, 0, -time.Millisecond}
	var mu sync.Mutex
	var order []time.Duration
	var wg sync.WaitGroup
	for _, off := range offsets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wt := &waiter{due: base.Add(off), ch: make(chan struct{}, 1), idx: -1}
			if !w.wait(context.Background(), wt) {
				t.Error("wait without cancel returned false")
			}
			if now := time.Now(); now.Before(wt.due) {
				t.Errorf("woken %v early", wt.due.Sub(now))
			}
			mu.Lock()
			order = append(order, off)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(order) != len(offsets) {
		t.Errorf("%d of %d waiters woke", len(order), len(offsets))
	}
	// The wake order is the heap's pop order (the goroutines above race to
	// record theirs, so it is checked here, on the heap itself).
	var h waitHeap
	for _, off := range offsets {
		heap.Push(&h, &waiter{due: base.Add(off), idx: -1})
	}
	var prev time.Time
	for h.Len() > 0 {
		wt := heap.Pop(&h).(*waiter)
		if wt.due.Before(prev) || wt.idx != -1 {
			t.Fatalf("heap popped %v after %v (idx %d)", wt.due, prev, wt.idx)
		}
		prev = wt.due
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	wt := &waiter{due: time.Now().Add(time.Hour), ch: make(chan struct{}, 1), idx: -1}
	if w.wait(ctx, wt) {
		t.Fatal("a wait an hour away returned before its context ended")
	}
	if wt.idx != -1 || len(wt.ch) != 0 {
		t.Errorf("cancelled waiter still queued (idx %d) or signalled (%d)", wt.idx, len(wt.ch))
	}
	w.mu.Lock()
	n := len(w.h)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("%d waiters left in the heap", n)
	}
}
