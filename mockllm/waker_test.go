package mockllm

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestWakerOrderAndCancel: waiters wake no earlier than due and in due
// order; a cancelled wait leaves no stale wake-up behind.
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
	// Waiters due 1 ms or more apart must wake in order (closer ones may race
	// to record themselves).
	pos := map[time.Duration]int{}
	for i, off := range order {
		pos[off] = i
	}
	if pos[3*time.Millisecond] < pos[2*time.Millisecond] || pos[2*time.Millisecond] < pos[100*time.Microsecond] {
		t.Errorf("wake order %v", order)
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
