// Package wake wakes goroutines at precise times without holding a
// scheduler thread while they wait.
//
// The Go runtime parks timers in its network poller, whose epoll_wait
// timeout has millisecond resolution: when a process is otherwise idle, a
// timer due in 300 µs fires up to a millisecond late. Sleeping in the
// kernel instead (nanosleep) is precise but holds one of the runtime's Ps
// in a system call for the whole sleep; on a 2-core machine that leaves a
// single P for everything else, and request reading starved behind it.
//
// A Waker keeps its waiters' due times in a heap and arms one Linux
// timerfd for the earliest. The timerfd is registered with the runtime's
// network poller like a socket, so the poller's epoll_wait returns the
// moment it expires (hrtimer resolution, tens of µs on a VM), and no P is
// held meanwhile. A runtime timer set to the same time stands beside it,
// for a busy process, whose scheduler checks timers at every switch but
// polls the network less often. One goroutine wakes on the earlier of the
// two and wakes every waiter that is due; waiters due together cost one
// wake-up of that goroutine.
// Off Linux, or where no timerfd can be had, a runtime timer stands in.
package wake

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Waiter is one parked goroutine's place on a Waker. A goroutine that
// waits again and again (a stream, token after token) reuses one Waiter,
// so the wait allocates nothing.
type Waiter struct {
	due time.Time
	ch  chan struct{} // buffered 1: the wake-up
	idx int           // heap index, -1 when not queued
}

// NewWaiter returns a Waiter ready for Wait.
func NewWaiter() *Waiter { return &Waiter{ch: make(chan struct{}, 1), idx: -1} }

type waitHeap []*Waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waitHeap) Push(x any) {
	w := x.(*Waiter)
	w.idx = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.idx = -1
	return w
}

// alarm is what the waking goroutine sleeps on: on Linux a timerfd and a
// runtime timer, elsewhere the runtime timer alone.
type alarm interface {
	// set makes wait return at about d from now, replacing any earlier
	// setting; d <= 0 means at once (never "disarm": a waiter that raced
	// past its due time while queueing must still be woken).
	set(d time.Duration)
	// wait blocks until the alarm goes off or close is called; it reports
	// false once closed.
	wait() bool
	close()
}

// Waker wakes Waiters at their due times. It is safe for concurrent use.
type Waker struct {
	mu   sync.Mutex
	h    waitHeap
	a    alarm
	once sync.Once
	done chan struct{}
}

// New starts a Waker; Close stops it.
func New() *Waker {
	w := &Waker{a: newAlarm(), done: make(chan struct{})}
	go w.loop()
	return w
}

// Precise reports whether this Waker has sub-millisecond resolution (a
// timerfd) rather than the runtime's timers.
func (w *Waker) Precise() bool {
	_, ok := w.a.(*timerAlarm)
	return !ok
}

// Close stops the waking goroutine. Waits in progress then end only with
// their contexts.
func (w *Waker) Close() {
	w.once.Do(func() {
		w.a.close()
		<-w.done
	})
}

// Wait blocks until due or until ctx ends, and reports whether it got to
// due. It returns at once when due has passed.
func (w *Waker) Wait(ctx context.Context, wt *Waiter, due time.Time) bool {
	if time.Until(due) <= 0 {
		return ctx.Err() == nil
	}
	wt.due = due
	w.mu.Lock()
	heap.Push(&w.h, wt)
	if wt.idx == 0 { // a new earliest: the alarm may be set for later
		w.a.set(time.Until(due))
	}
	w.mu.Unlock()
	select {
	case <-wt.ch:
		return true
	case <-ctx.Done():
		w.mu.Lock()
		if wt.idx >= 0 {
			heap.Remove(&w.h, wt.idx)
		}
		w.mu.Unlock()
		select { // a wake-up sent meanwhile must not leak into the next wait
		case <-wt.ch:
		default:
		}
		return false
	}
}

// Sleep is Wait for a caller without a Waiter of its own to reuse.
func (w *Waker) Sleep(ctx context.Context, due time.Time) bool {
	return w.Wait(ctx, NewWaiter(), due)
}

func (w *Waker) loop() {
	defer close(w.done)
	for {
		w.mu.Lock()
		now := time.Now()
		for len(w.h) > 0 && !w.h[0].due.After(now) {
			wt := heap.Pop(&w.h).(*Waiter)
			wt.ch <- struct{}{} // never blocks: one wake-up per queued wait
		}
		if len(w.h) > 0 {
			w.a.set(w.h[0].due.Sub(now))
		}
		w.mu.Unlock()
		if !w.a.wait() {
			return
		}
	}
}

// timerAlarm is the portable alarm: a runtime timer, millisecond-precise
// when the process is idle.
type timerAlarm struct {
	t    *time.Timer
	stop chan struct{}
	once sync.Once
}

func newTimerAlarm() *timerAlarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerAlarm{t: t, stop: make(chan struct{})}
}

func (a *timerAlarm) set(d time.Duration) { a.t.Reset(d) }

func (a *timerAlarm) wait() bool {
	select {
	case <-a.t.C:
		return true
	case <-a.stop:
		return false
	}
}

func (a *timerAlarm) close() {
	a.once.Do(func() {
		close(a.stop)
		a.t.Stop()
	})
}
