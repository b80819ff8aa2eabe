package mockllm

import (
	"container/heap"
	"context"
	"runtime"
	"sync"
	"time"
)

// The Go runtime sleeps in epoll_wait, whose timeout has millisecond
// resolution: when the process is otherwise idle, a timer due in 300 µs
// fires up to a millisecond late. That is most of the mock's emission error
// at low load. The waker fixes it: a stream sleeps on an ordinary timer
// until preciseWindow before its due time, then parks on the waker, one
// goroutine on its own OS thread that sleeps with nanosleep (microsecond
// resolution) and wakes each waiter on time. Its cost is one short
// nanosleep per wakeStep while waiters are pending and nothing when none are.
const (
	preciseWindow = 1500 * time.Microsecond
	wakeStep      = 50 * time.Microsecond
)

// waiter is one parked stream; an emitter reuses its waiter for every token.
type waiter struct {
	due time.Time
	ch  chan struct{} // buffered 1: the wake-up
	idx int           // heap index, -1 when not queued
}

type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
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

type waker struct {
	mu   sync.Mutex
	h    waitHeap
	kick chan struct{}
	stop chan struct{}
	once sync.Once
}

func newWaker() *waker {
	w := &waker{kick: make(chan struct{}, 1), stop: make(chan struct{})}
	go w.loop()
	return w
}

func (w *waker) close() { w.once.Do(func() { close(w.stop) }) }

// wait blocks until wt.due or ctx ends, and reports whether it got to due.
func (w *waker) wait(ctx context.Context, wt *waiter) bool {
	w.mu.Lock()
	heap.Push(&w.h, wt)
	first := len(w.h) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
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

func (w *waker) loop() {
	runtime.LockOSThread()
	setTimerSlack()
	for {
		w.mu.Lock()
		now := time.Now()
		for len(w.h) > 0 && !w.h[0].due.After(now) {
			wt := heap.Pop(&w.h).(*waiter)
			wt.ch <- struct{}{} // never blocks: one wake-up per queued wait
		}
		var next time.Duration = -1
		if len(w.h) > 0 {
			next = w.h[0].due.Sub(now)
		}
		w.mu.Unlock()
		if next < 0 {
			select {
			case <-w.kick:
				continue
			case <-w.stop:
				return
			}
		}
		select {
		case <-w.stop:
			return
		default:
		}
		// Waiters that arrive while we sleep are at most wakeStep late.
		preciseSleep(min(next, wakeStep))
	}
}
