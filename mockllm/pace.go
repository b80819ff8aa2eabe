package mockllm

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-testbed/testbed/internal/wake"
)

// preciseMaxStreams is the load up to which streams sleep on the precise
// waker (internal/wake). Below it the process is idle between tokens often
// enough that the runtime's timers, parked in epoll_wait's whole
// milliseconds, fire up to 1 ms late: at 500 streams over a Unix socket
// (`make bench`, http1-unix) lateness p99 was 2.4 ms with 17 % of tokens
// over 1 ms on runtime timers, 0.47 ms and 0.2 % on the waker; at
// concurrency 100 the harness's TTFT p50 read 103–105 ms against the
// mock's 100 on runtime timers, 101.6–102.8 ms on the waker. Above it the
// scheduler is busy enough to check its timers at every goroutine switch,
// and one runtime timer per stream spreads the wake-ups over every P where
// the waker's one goroutine serialises them and costs more CPU: at 2,000
// streams lateness p50 was 0.02 ms on runtime timers and 4.1 ms on the
// waker.
const preciseMaxStreams = 512

// pacer holds one stream to its due times, and measures how late each
// write starts against them: the mock's own error, which it promises to
// keep under a millisecond.
type pacer struct {
	waker    *wake.Waker   // nil with WithPreciseTimers(false)
	streams  *atomic.Int64 // the server's generating streams: the load that picks the clock
	lateness prometheus.Observer
	wt       *wake.Waiter // this stream's place on the waker, reused so a wait does not allocate
	timer    *time.Timer  // this stream's runtime timer, made on first use
}

func newPacer(waker *wake.Waker, streams *atomic.Int64, lateness prometheus.Observer) pacer {
	return pacer{waker: waker, streams: streams, lateness: lateness, wt: wake.NewWaiter()}
}

// until waits until t, on the precise waker at low load, else on a
// runtime timer, and reports whether it got there before ctx ended.
func (p *pacer) until(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	if p.waker == nil || p.streams.Load() > preciseMaxStreams {
		return p.sleep(ctx, d)
	}
	return p.waker.Wait(ctx, p.wt, t)
}

func (p *pacer) sleep(ctx context.Context, d time.Duration) bool {
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
		return true
	case <-ctx.Done():
		p.timer.Stop()
		return false
	}
}

// late records how late a write that began at wrote was against due.
// Waiting never ends early, but the clock reading is clamped anyway: the
// histogram has no bucket below zero.
func (p *pacer) late(due, wrote time.Time) {
	p.lateness.Observe(max(0, wrote.Sub(due).Seconds()))
}

// stop releases the runtime timer, if the stream made one.
func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
