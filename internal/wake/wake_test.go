package wake

import (
	"container/heap"
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestOrderAndCancel: waiters wake, never before their due time; the heap
// pops in due order; a cancelled wait leaves no stale wake-up behind.
func TestOrderAndCancel(t *testing.T) {
	t.Parallel()
	w := New()
	defer w.Close()
	if runtime.GOOS == "linux" && !w.Precise() {
		t.Error("no timerfd on Linux: the waker fell back to runtime timers")
	}
	base := time.Now()
	offsets := []time.Duration{
		3 * time.Millisecond,
		100 * time.Microsecond,
		2 * time.Millisecond,
		0,
		-time.Millisecond,
		2 * time.Millisecond,
	}
	var wg sync.WaitGroup
	for _, off := range offsets {
		wg.Go(func() {
			due := base.Add(off)
			if !w.Wait(context.Background(), NewWaiter(), due) {
				t.Error("wait without cancel returned false")
			}
			if now := time.Now(); now.Before(due) {
				t.Errorf("woken %v early", due.Sub(now))
			}
		})
	}
	wg.Wait()

	// The wake order is the heap's pop order; the goroutines above race to
	// record theirs, so it is checked on the heap itself.
	var h waitHeap
	for _, off := range offsets {
		heap.Push(&h, &Waiter{due: base.Add(off), idx: -1})
	}
	var prev time.Time
	for h.Len() > 0 {
		wt := heap.Pop(&h).(*Waiter)
		if wt.due.Before(prev) || wt.idx != -1 {
			t.Fatalf("heap popped %v after %v (idx %d)", wt.due, prev, wt.idx)
		}
		prev = wt.due
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	wt := NewWaiter()
	if w.Wait(ctx, wt, time.Now().Add(time.Hour)) {
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
	// The waiter is reusable after a cancelled wait.
	if !w.Wait(context.Background(), wt, time.Now().Add(200*time.Microsecond)) {
		t.Error("a reused waiter did not wake")
	}
}

// TestEarlierWaiterRearms: a waiter due before the one the alarm is set
// for is woken at its own time, not the later one's.
func TestEarlierWaiterRearms(t *testing.T) {
	t.Parallel()
	w := New()
	defer w.Close()
	late := make(chan struct{})
	go func() {
		defer close(late)
		w.Sleep(context.Background(), time.Now().Add(2*time.Second))
	}()
	time.Sleep(10 * time.Millisecond) // the alarm is now set 2 s out
	start := time.Now()
	if !w.Sleep(context.Background(), start.Add(5*time.Millisecond)) {
		t.Fatal("sleep returned false")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a 5 ms wait queued behind a 2 s one took %v", took)
	}
	<-late
}

// TestPastDue: a due time already passed returns at once, true unless the
// context has ended.
func TestPastDue(t *testing.T) {
	w := New()
	defer w.Close()
	if !w.Sleep(context.Background(), time.Now().Add(-time.Second)) {
		t.Error("past due with a live context returned false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w.Sleep(ctx, time.Now().Add(-time.Second)) {
		t.Error("past due with an ended context returned true")
	}
}

// TestCloseEndsLoop: Close returns (the loop goroutine has ended) and a
// second Close is harmless.
func TestCloseEndsLoop(t *testing.T) {
	w := New()
	w.Sleep(context.Background(), time.Now().Add(100*time.Microsecond))
	w.Close()
	w.Close()
}

// BenchmarkLateness compares how late a sub-millisecond sleep wakes, on
// the Waker and on time.Sleep, in an otherwise idle process:
//
//	go test ./internal/wake -run '^$' -bench Lateness -benchtime 2000x
func BenchmarkLateness(b *testing.B) {
	w := New()
	defer w.Close()
	for _, bc := range []struct {
		name  string
		sleep func(d time.Duration)
	}{
		{"waker", func(d time.Duration) { w.Sleep(context.Background(), time.Now().Add(d)) }},
		{"time.Sleep", time.Sleep},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var late []time.Duration
			i := 0
			for b.Loop() {
				d := time.Duration(100+i%900) * time.Microsecond
				i++
				t0 := time.Now()
				bc.sleep(d)
				late = append(late, time.Since(t0)-d)
			}
			slices.Sort(late)
			q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / 1e3 }
			b.ReportMetric(q(0.5), "late-p50-µs")
			b.ReportMetric(q(0.99), "late-p99-µs")
		})
	}
}

// TestNearDueRace: many waiters due within microseconds of queueing, so
// some pass their due time between Wait's check and the alarm's setting.
// Each must still wake (a lost alarm would strand all of them).
func TestNearDueRace(t *testing.T) {
	t.Parallel()
	w := New()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var stranded sync.Map
	for g := range 200 {
		wg.Go(func() {
			wt := NewWaiter()
			for i := range 50 {
				due := time.Now().Add(time.Duration((g*7+i*13)%40) * time.Microsecond)
				if !w.Wait(ctx, wt, due) {
					stranded.Store(g, i)
					return
				}
			}
		})
	}
	wg.Wait()
	stranded.Range(func(g, i any) bool {
		t.Errorf("waiter %v never woke at its wait %v", g, i)
		return true
	})
}
