package results

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Periodic is the testbed's one sampling loop, shared by the GPU and
// server-metric samplers and the client monitor: functions registered with
// Every run on a ticker and Add lines to a buffer that never waits for the
// disk; the buffer is written out as JSON lines every few periods and once
// more at Stop. Its methods are safe for concurrent use.
type Periodic[T any] struct {
	interval   time.Duration
	flushEvery time.Duration
	capacity   int
	file       *os.File
	w          *LineWriter[T] // nil: lines are counted and discarded

	mu    sync.Mutex
	buf   []T
	stats PeriodicStats
	werr  error

	wmu      sync.Mutex // serialises writes to w
	ticks    []func()
	stop     chan struct{}
	loops    sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// PeriodicConfig configures a Periodic. Interval is required; the rest
// have defaults.
type PeriodicConfig struct {
	Interval   time.Duration // period of the functions registered with Every
	FlushEvery time.Duration // default: five intervals, at most 5 s
	Capacity   int           // lines held between two writes; default 4096
	Path       string        // a file to create for the lines, closed by Stop
	Out        io.Writer     // or a writer the caller keeps; neither: lines are discarded
}

// PeriodicStats counts a Periodic's lines.
type PeriodicStats struct {
	Added   int64 `json:"added"`   // lines accepted into the buffer
	Dropped int64 `json:"dropped"` // lines refused because the buffer was full
	Written int64 `json:"written"` // lines written out (or discarded without an output)
	Lost    int64 `json:"lost"`    // lines lost because the output failed
}

// ErrDropped is wrapped by Stop's error when lines were dropped because the
// buffer was full, so a caller can warn rather than fail.
var ErrDropped = errors.New("lines dropped")

// NewPeriodic starts the flush loop; register samplers with Every.
func NewPeriodic[T any](cfg PeriodicConfig) (*Periodic[T], error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("interval %v must be positive", cfg.Interval)
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("buffer %d must be positive", cfg.Capacity)
	}
	p := &Periodic[T]{
		interval:   cfg.Interval,
		flushEvery: cfg.FlushEvery,
		capacity:   cfg.Capacity,
		stop:       make(chan struct{}),
	}
	if p.capacity == 0 {
		p.capacity = 4096
	}
	if p.flushEvery <= 0 {
		p.flushEvery = min(5*p.interval, 5*time.Second)
	}
	out := cfg.Out
	if cfg.Path != "" {
		f, err := os.Create(cfg.Path)
		if err != nil {
			return nil, err
		}
		p.file = f
		out = f
	}
	if out != nil {
		p.w = NewLineWriter[T](out)
	}
	p.loops.Add(1)
	go p.loop(p.flushEvery, p.flush)
	return p, nil
}

// Every calls fn at once and then once per interval until Stop, and once
// more at Stop, so the lines cover the whole span. Calls of one fn never
// overlap; fn should Add what it reads.
func (p *Periodic[T]) Every(fn func()) {
	p.mu.Lock()
	p.ticks = append(p.ticks, fn)
	p.mu.Unlock()
	p.loops.Add(1)
	go func() {
		fn()
		p.loop(p.interval, fn)
	}()
}

func (p *Periodic[T]) loop(every time.Duration, fn func()) {
	defer p.loops.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// Add buffers one line. It reports false, and counts the line as dropped,
// when the buffer is full.
func (p *Periodic[T]) Add(v T) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) >= p.capacity {
		p.stats.Dropped++
		return false
	}
	p.stats.Added++
	p.buf = append(p.buf, v)
	return true
}

// Flush writes the buffered lines now.
func (p *Periodic[T]) Flush() { p.flush() }

// flush writes the buffered lines out. A write error is kept for Stop and
// the lines it lost are counted, never dropped silently.
func (p *Periodic[T]) flush() {
	p.mu.Lock()
	batch := p.buf
	p.buf = make([]T, 0, min(len(batch)*2+1, p.capacity))
	p.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	written, err := p.write(batch)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Written += written
	p.stats.Lost += int64(len(batch)) - written
	if err != nil && p.werr == nil {
		p.werr = fmt.Errorf("write: %w", err)
	}
}

func (p *Periodic[T]) write(batch []T) (written int64, err error) {
	if p.w == nil {
		return int64(len(batch)), nil
	}
	for i := range batch {
		if err := p.w.Write(&batch[i]); err != nil {
			return 0, err
		}
	}
	if err := p.w.Flush(); err != nil {
		return 0, err
	}
	return int64(len(batch)), nil
}

// Stats returns the counts so far.
func (p *Periodic[T]) Stats() PeriodicStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Stop ends the loops, calls every registered function once more, writes
// everything buffered and closes the file it created. It is safe to call
// twice; later calls return the first call's result. The error wraps
// ErrDropped when the buffer overflowed, and is the output's error when
// lines were lost to it.
func (p *Periodic[T]) Stop() error {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.loops.Wait()
		p.mu.Lock()
		ticks := p.ticks
		p.mu.Unlock()
		for _, fn := range ticks {
			fn()
		}
		p.flush()
		p.mu.Lock()
		err := p.werr
		if p.stats.Lost > 0 {
			err = fmt.Errorf("%w (%d lines lost)", err, p.stats.Lost)
		}
		if n := p.stats.Dropped; n > 0 {
			err = errors.Join(err, fmt.Errorf("%d %w (buffer of %d full)", n, ErrDropped, p.capacity))
		}
		p.mu.Unlock()
		if p.file != nil {
			if cerr := p.file.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		p.stopErr = err
	})
	return p.stopErr
}
