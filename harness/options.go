package harness

import (
	"io"
	"time"

	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
)

// RunOption configures Run. Every option of a run is here.
type RunOption func(*runOptions)

type runOptions struct {
	monitors  []StepMonitor
	version   string
	progress  func(Progress)
	every     time.Duration
	warnings  io.Writer
	clientMon *clientmon.Monitor // WithClientMonitor; nil: Run starts its own
	noMonitor bool               // WithoutClientMonitor
	stop      <-chan struct{}    // WithStop
	observe   func(*results.Record)
}

// WithRecordObserver makes Run hand every finished record to fn, on the
// one goroutine that writes requests.jsonl, after the record is written:
// the request goroutines never wait for it, and a slow fn delays only the
// writer (whose queue holds thousands of records). fn must not keep rec,
// which is recycled when fn returns. Live metrics hook in here.
func WithRecordObserver(fn func(rec *results.Record)) RunOption {
	return func(o *runOptions) { o.observe = fn }
}

// WithVersion records the tool's version in run.json.
func WithVersion(v string) RunOption { return func(o *runOptions) { o.version = v } }

// WithProgress makes Run call fn about every interval with the run's
// progress, from its own goroutine; fn must return quickly.
func WithProgress(interval time.Duration, fn func(Progress)) RunOption {
	return func(o *runOptions) {
		o.progress = fn
		o.every = interval
	}
}

// WithWarnings prints what a person watching the run should know at once
// to w: a client-bound step, samples dropped or failed. Without it they
// are only in the results directory.
func WithWarnings(w io.Writer) RunOption { return func(o *runOptions) { o.warnings = w } }

// WithStepMonitor makes Run report each step to m, beside the client
// monitor.
func WithStepMonitor(m StepMonitor) RunOption {
	return func(o *runOptions) { o.monitors = append(o.monitors, m) }
}

// WithClientMonitor makes Run judge its steps with m, which the caller
// started and stops (so several runs can share one client.jsonl), instead
// of starting its own monitor writing the results directory's client.jsonl.
func WithClientMonitor(m *clientmon.Monitor) RunOption {
	return func(o *runOptions) { o.clientMon = m }
}

// WithoutClientMonitor runs without watching the client process: no
// client.jsonl and no client-bound verdicts. For tests that judge steps
// themselves; a measurement should keep the monitor.
func WithoutClientMonitor() RunOption { return func(o *runOptions) { o.noMonitor = true } }

// WithStop ends the grace period of an interrupted run at once when stop
// is closed (a second Ctrl-C): in-flight requests are cancelled, recorded
// as cancelled, and every file is written as after the grace period.
func WithStop(stop <-chan struct{}) RunOption { return func(o *runOptions) { o.stop = stop } }

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
	// StepDuration is the step's measured phase when bounded by time
	// (warm-up excluded); 0 when bounded by requests only.
	StepDuration time.Duration
}

// Fraction is how far the step has come, in [0, 1], by requests finished
// or by time; -1 when neither bounds it.
func (p Progress) Fraction() float64 {
	var f float64
	switch {
	case p.StepTotal > 0:
		f = float64(p.Done) / float64(p.StepTotal)
	case p.StepDuration > 0:
		f = float64(p.Elapsed) / float64(p.StepDuration)
	default:
		return -1
	}
	return min(1, max(0, f))
}

// Remaining estimates the time left in the step from the pace so far: by
// time for a step bounded by time, else from the requests finished; -1
// when nothing has finished yet to estimate from.
func (p Progress) Remaining() time.Duration {
	if p.StepDuration > 0 && p.StepTotal == 0 {
		return max(0, p.StepDuration-p.Elapsed)
	}
	f := p.Fraction()
	if f <= 0 {
		return -1
	}
	return time.Duration(float64(p.Elapsed) * (1 - f) / f)
}
