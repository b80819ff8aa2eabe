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
// fires up to a millisecond late. That was most of the mock's emission error
// at low load. The waker fixes it: streams park on the waker, one goroutine
// on its own OS thread that keeps their due times in a heap. While the
// earliest is more than preciseWindow away it waits on an ordinary timer
// (or a kick when an earlier waiter arrives); inside the window it sleeps
// with nanosleep (microsecond resolution) in steps of at most wakeStep and
// wakes each waiter on time. Every token costs one goroutine wake-up, and
// tokens due close together are woken in one batch.
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
	head := wt.idx == 0
	w.mu.Unlock()
	if head { // the loop may be waiting for a later time
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
	coarse := time.NewTimer(time.Hour)
	coarse.Stop()
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
		switch {
		case next < 0:
			select {
			case <-w.kick:
			case <-w.stop:
				return
			}
		case next > preciseWindow:
			coarse.Reset(next - preciseWindow)
			select {
			case <-coarse.C:
			case <-w.kick:
				coarse.Stop()
			case <-w.stop:
				return
			}
		default:
			select {
			case <-w.stop:
				return
			default:
			}
			// A waiter that arrives during this sleep is at most wakeStep late.
			preciseSleep(min(next, wakeStep))
		}
	}
}
