package engine

import (
	"context"
	"slices"
	"sync"
	"time"
)

// RealClock is the wall clock: Now is time.Now (with its monotonic
// reading) and SleepUntil waits on a timer for the absolute time, so
// successive sleeps never accumulate drift. Its zero value is ready to use.
// Inside a testing/synctest bubble it runs on the bubble's virtual time.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// SleepUntil blocks until t or until ctx ends.
func (RealClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// VirtualClock is a clock that moves only when told to, for tests that
// drive time by hand (for example from outside a testing/synctest bubble,
// where real network I/O rules synctest out). SleepUntil blocks until
// AdvanceTo or Step reaches its deadline. The zero value starts at the zero
// time; NewVirtualClock picks the start.
//
// With the step scheduler the loop is the clock's only sleeper while it
// runs a step, so Step(ctx, 1) advances exactly one engine step, and
// requests started while the loop sleeps join the next step
// deterministically.
type VirtualClock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []*sleeper
	changed  chan struct{} // closed and replaced whenever sleepers change
}

type sleeper struct {
	at   time.Time
	wake chan struct{}
}

// NewVirtualClock returns a VirtualClock reading start.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start}
}

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// SleepUntil blocks until the clock is advanced to t or ctx ends.
func (c *VirtualClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	if !t.After(c.now) {
		c.mu.Unlock()
		return ctx.Err()
	}
	s := &sleeper{at: t, wake: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.broadcast()
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.sleepers, s); i >= 0 {
			c.sleepers = slices.Delete(c.sleepers, i, i+1)
			c.broadcast()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// broadcast wakes WaitSleepers; c.mu must be held.
func (c *VirtualClock) broadcast() {
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// AdvanceTo moves the clock to t (never backwards) and wakes every sleeper
// whose deadline has come.
func (c *VirtualClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.at.After(c.now) {
			kept = append(kept, s)
			continue
		}
		close(s.wake)
	}
	clear(c.sleepers[len(kept):])
	c.sleepers = kept
	c.broadcast()
}

// Advance moves the clock forward by d.
func (c *VirtualClock) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// Sleepers returns how many goroutines are blocked in SleepUntil.
func (c *VirtualClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}

// WaitSleepers blocks until at least n goroutines sleep on the clock.
func (c *VirtualClock) WaitSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.sleepers) >= n {
			c.mu.Unlock()
			return nil
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Step waits until n goroutines sleep on the clock, then advances it to the
// earliest of their deadlines and returns that time.
func (c *VirtualClock) Step(ctx context.Context, n int) (time.Time, error) {
	if err := c.WaitSleepers(ctx, n); err != nil {
		return time.Time{}, err
	}
	c.mu.Lock()
	if len(c.sleepers) == 0 { // a sleeper left through its context
		c.mu.Unlock()
		return c.Step(ctx, n)
	}
	next := c.sleepers[0].at
	for _, s := range c.sleepers[1:] {
		if s.at.Before(next) {
			next = s.at
		}
	}
	c.mu.Unlock()
	c.AdvanceTo(next)
	return next, nil
}
