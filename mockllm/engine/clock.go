package engine

import (
	"context"
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
