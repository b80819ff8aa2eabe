package engine

import (
	"fmt"
)

// Option configures New.
type Option func(*options)

type options struct {
	clock Clock
	seed  int64
}

// WithClock sets the time source (default RealClock). Tests pass a virtual
// clock so schedules are exact and fast.
func WithClock(c Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithSeed seeds the fixed-mode jitter; equal seeds and request IDs give
// equal samples.
func WithSeed(seed int64) Option {
	return func(o *options) { o.seed = seed }
}

// New validates p and returns the Scheduler its Mode asks for. Close it
// when done.
func New(p Profile, opts ...Option) (Scheduler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := options{clock: RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	switch p.Mode {
	case ModeFixed, ModeLoadCurve:
		return newFixed(p, o), nil
	case ModeEngine:
		return newStep(p, o), nil
	}
	return nil, fmt.Errorf("profile: mode: unsupported %q", p.Mode)
}
