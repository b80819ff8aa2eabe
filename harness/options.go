package harness

import "time"

// RunOption configures Run.
type RunOption func(*runOptions)

type runOptions struct {
	monitors []StepMonitor
	version  string
	progress func(Progress)
	start    time.Time // WithStart; zero: Run's own start
	every    time.Duration
}

// WithVersion records the tool's version in run.json.
func WithVersion(v string) RunOption { return func(o *runOptions) { o.version = v } }

// WithProgress makes Run call fn about every interval with the run's
// progress, from its own goroutine; fn must return quickly.
func WithProgress(interval time.Duration, fn func(Progress)) RunOption {
	return func(o *runOptions) { o.progress, o.every = fn, interval }
}

// Progress is a snapshot of a running run.
type Progress struct {
	Step      int           // index of the running step
	Steps     int           // number of steps in the run
	Label     string        // the step, e.g. "mock c=10"
	Sent      int64         // requests sent in this step
	Done      int64         // requests finished in this step
	Errors    int64         // of Done, those that failed
	InFlight  int64         // requests in flight now
	Elapsed   time.Duration // since the step began
	StepTotal int64         // requests planned for the step; 0 when bounded by duration only
}
