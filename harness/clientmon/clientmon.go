// Package clientmon watches the load client itself while it runs, so that a
// result can say whether the client, not the server, was the bottleneck.
//
// A Monitor samples the client process on the shared sampling loop
// (results.Periodic) (process and host CPU with
// gopsutil, RSS, threads, file descriptors, inet sockets, goroutines, GC
// pauses and Go scheduler latency from runtime/metrics) and keeps the samples
// in a buffer that the sampling loop never blocks on; a separate flusher
// writes them as JSON lines (DIR/client.jsonl). Steps of a run are bracketed
// by Begin/End (the harness calls them for every step of a run), and End judges the
// step against a table of rules: the client's measured delay in reading
// tokens (user-space read time minus the kernel's receive stamp) p99 above
// a bound, first, as the one rule that measures rather than infers; CPU at
// or above a share of the available cores, schedule lag p99 above a bound,
// Go scheduler latency p99 above a bound (only when the delay was not
// measured: it is the heuristic the measured delay replaces), file
// descriptors near their limit. A step that breaks any rule is
// client-bound, and the reason says which rule, with the measured figure, in
// plain words.
//
// When the mock runs in the same process as the client (testbed calibrate
// without --url), the process CPU includes the mock's; a verdict is then
// about the pair, which the caller must say.
package clientmon

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Defaults of the client-bound rules.
const (
	DefaultInterval        = time.Second
	DefaultCPUThreshold    = 0.85 // share of the available cores
	DefaultMaxScheduleLag  = time.Millisecond
	DefaultMaxSchedLatency = time.Millisecond
	DefaultMaxClientDelay  = time.Millisecond
	DefaultFDShare         = 0.90 // share of RLIMIT_NOFILE
	// hostBusy is the host CPU (all cores) from which a client-bound
	// verdict adds that other processes were competing.
	hostBusy = 95.0
)

// LagUnknown is passed to End when the caller has no schedule lag figure.
const LagUnknown time.Duration = -1

// Option configures a Monitor.
type Option func(*Monitor)

// WithInterval sets the sampling period (default 1 s). Shorter periods cost
// more: each sample reads /proc, and the socket count walks every descriptor.
func WithInterval(d time.Duration) Option { return func(m *Monitor) { m.interval = d } }

// WithCPUThreshold sets the share (0..1] of the available cores at which a
// step is client-bound (default 0.85).
func WithCPUThreshold(share float64) Option { return func(m *Monitor) { m.cpuShare = share } }

// WithMaxScheduleLag sets the schedule-lag p99 above which a step is
// client-bound (default 1 ms).
func WithMaxScheduleLag(d time.Duration) Option { return func(m *Monitor) { m.maxLag = d } }

// WithMaxSchedLatency sets the Go scheduler latency p99 (runnable goroutine
// waiting for a thread) above which a step is client-bound (default 1 ms):
// a goroutine that waits that long to run takes its timestamps that late.
// Zero turns the rule off.
func WithMaxSchedLatency(d time.Duration) Option { return func(m *Monitor) { m.maxSched = d } }

// WithMaxClientDelay sets the client delay p99 (tokens waiting in the
// socket for the client to read them, measured from kernel receive stamps)
// above which a step is client-bound (default 1 ms).
func WithMaxClientDelay(d time.Duration) Option { return func(m *Monitor) { m.maxDelay = d } }

// WithCores overrides the available cores (default AvailableCores()).
func WithCores(n float64) Option { return func(m *Monitor) { m.cores = n } }

// WithOutput writes samples and step verdicts as JSON lines to w. The caller
// keeps ownership of w.
func WithOutput(w io.Writer) Option { return func(m *Monitor) { m.out = w } }

// WithFile writes samples and step verdicts as JSON lines to the file at
// path, created by New and closed by Stop.
func WithFile(path string) Option { return func(m *Monitor) { m.path = path } }

// WithWarnings prints one line per client-bound step to w (the terminal).
func WithWarnings(w io.Writer) Option { return func(m *Monitor) { m.warn = w } }

// WithSockets turns the socket count on or off (default on). Counting walks
// the process's descriptors and /proc/net tables, which at tens of thousands
// of connections costs noticeable CPU per sample.
func WithSockets(on bool) Option { return func(m *Monitor) { m.sockets = on } }

// Monitor samples the client process. Create it with New; call Stop once the
// run is over. Its methods are safe for concurrent use.
type Monitor struct {
	interval  time.Duration
	cpuShare  float64
	maxLag    time.Duration
	maxSched  time.Duration
	maxDelay  time.Duration
	cores     float64
	out       io.Writer
	path      string
	warn      io.Writer
	sockets   bool
	fdLimit   uint64
	startTime time.Time

	smu       sync.Mutex // guards s (the sampler is not concurrent)
	s         *sampler
	cpuBase   time.Duration // process CPU at New, to report whole-run CPU
	cpuBaseOK bool          // whether that reading succeeded; without it CPUSince is unknown

	lines *results.Periodic[any] // samples and verdicts, on the shared sampling loop

	mu       sync.Mutex
	current  string
	steps    map[string]*stepAcc
	verdicts []results.Verdict

	stopOnce sync.Once
	stopErr  error
}

// stepAcc accumulates what the monitor sees during one step.
type stepAcc struct {
	start    time.Time
	cpuStart time.Duration
	cpuOK    bool
	sched    histDelta
	v        results.Verdict
	cpuSum   float64 // of sampled process CPU, fallback for the mean
}

// New starts a Monitor: it takes a first sample at once and then one per
// interval until Stop.
func New(opts ...Option) (*Monitor, error) {
	m := &Monitor{
		interval: DefaultInterval,
		cpuShare: DefaultCPUThreshold,
		maxLag:   DefaultMaxScheduleLag,
		maxSched: DefaultMaxSchedLatency,
		maxDelay: DefaultMaxClientDelay,
		sockets:  true,
		steps:    map[string]*stepAcc{},
	}
	for _, o := range opts {
		o(m)
	}
	switch {
	case m.interval <= 0:
		return nil, fmt.Errorf("clientmon: interval %v must be positive", m.interval)
	case m.cpuShare <= 0 || m.cpuShare > 1:
		return nil, fmt.Errorf("clientmon: CPU threshold %v must be in (0, 1]", m.cpuShare)
	case m.maxLag < 0, m.maxSched < 0, m.maxDelay < 0:
		return nil, fmt.Errorf("clientmon: latency bounds must not be negative")
	}
	if m.cores <= 0 {
		m.cores = AvailableCores()
	}
	m.fdLimit = fdLimit()
	m.startTime = time.Now()
	m.cpuBase, m.cpuBaseOK = processCPU()
	s, err := newSampler(m.startTime, m.cores, m.sockets)
	if err != nil {
		return nil, err
	}
	m.s = s
	lines, err := results.NewPeriodic[any](results.PeriodicConfig{Interval: m.interval, Path: m.path, Out: m.out})
	if err != nil {
		return nil, fmt.Errorf("clientmon: samples file: %w", err)
	}
	m.lines = lines
	m.lines.Every(func() { m.sampleNow() })
	return m, nil
}

// sampleNow takes one sample, attributes it to the running step and buffers it.
func (m *Monitor) sampleNow() results.ClientSample {
	m.mu.Lock()
	step := m.current
	m.mu.Unlock()

	m.smu.Lock()
	smp := m.s.take(context.Background(), step)
	sched := m.s.lastSched
	m.smu.Unlock()

	m.mu.Lock()
	defer m.mu.Unlock()
	if acc := m.steps[smp.Step]; acc != nil && smp.Step != "" {
		acc.observe(smp, sched)
	}
	m.lines.Add(smp)
	return smp
}

func (a *stepAcc) observe(s results.ClientSample, sched histDelta) {
	v := &a.v
	v.Samples++
	a.cpuSum += s.CPU
	v.PeakCPUOfAvailable = max(v.PeakCPUOfAvailable, s.CPUOf)
	v.PeakHostCPU = max(v.PeakHostCPU, s.Host)
	v.GCPauseMaxMS = max(v.GCPauseMaxMS, s.GCPauseMaxMS)
	v.PeakFDs = max(v.PeakFDs, s.FDs)
	v.PeakSockets = max(v.PeakSockets, s.Socket)
	v.PeakGoroutines = max(v.PeakGoroutines, s.Goroutines)
	v.PeakRSS = max(v.PeakRSS, s.RSS)
	a.sched = a.sched.merge(sched)
}

// Begin marks the start of step name. It takes a sample at once, so that
// the previous interval is not counted in this step.
func (m *Monitor) Begin(name string) {
	m.sampleNow()
	cpu, ok := processCPU()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps[name] = &stepAcc{
		start:    time.Now(),
		cpuStart: cpu,
		cpuOK:    ok,
		v:        results.Verdict{Kind: "step", Step: name, Cores: m.cores},
	}
	m.current = name
}

// End closes step name and judges it. scheduleLagP99 is the harness's
// schedule lag p99 for the step, or LagUnknown. Ending a step that was never
// begun returns a verdict with no figures and ClientBound false.
func (m *Monitor) End(name string, scheduleLagP99 time.Duration) results.Verdict {
	return m.EndStep(name, -1, scheduleLagP99)
}

// EndStep is End for a step of a run: index is its position in the run
// (summary.json's step), kept in the verdict so a report can match them.
func (m *Monitor) EndStep(name string, index int, scheduleLagP99 time.Duration) results.Verdict {
	return m.EndStepFigures(name, index, StepFigures{ScheduleLagP99: scheduleLagP99, ClientDelayP99: LagUnknown})
}

// StepFigures are the harness's own measurements of a step, for the verdict.
type StepFigures struct {
	ScheduleLagP99 time.Duration // send − intended, p99; LagUnknown when not measured
	// ClientDelayP99 is user-space read − kernel receive per token chunk,
	// p99; LagUnknown without kernel stamps.
	ClientDelayP99 time.Duration
}

// EndStepFigures is EndStep with every figure the harness measured.
func (m *Monitor) EndStepFigures(name string, index int, f StepFigures) results.Verdict {
	scheduleLagP99 := f.ScheduleLagP99
	m.mu.Lock()
	acc := m.steps[name]
	m.mu.Unlock()
	if acc == nil {
		return results.Verdict{Kind: "step", Step: name, StepIndex: index, ScheduleLagP99MS: -1, ClientDelayP99MS: -1}
	}
	acc.v.StepIndex = index
	cpuEnd, ok := processCPU()
	m.sampleNow() // the last interval belongs to this step

	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.steps, name)
	if m.current == name {
		m.current = ""
	}
	v := acc.v
	wall := time.Since(acc.start)
	v.Duration = round3(wall.Seconds())
	switch {
	case ok && acc.cpuOK && wall > 0:
		v.CPUPercent = round2(100 * float64(cpuEnd-acc.cpuStart) / float64(wall))
	case v.Samples > 0:
		v.CPUPercent = round2(acc.cpuSum / float64(v.Samples))
	}
	v.CPUOfAvailable = round2(v.CPUPercent / m.cores)
	v.ScheduleLagP99MS = -1
	if scheduleLagP99 >= 0 {
		v.ScheduleLagP99MS = round3(float64(scheduleLagP99) / 1e6)
	}
	v.SchedLatencyP99MS = round3(acc.sched.quantile(0.99) * 1e3)
	v.ClientDelayP99MS = -1
	if f.ClientDelayP99 >= 0 {
		v.ClientDelayP99MS = round3(float64(f.ClientDelayP99) / 1e6)
	}
	for _, r := range m.rules() {
		if bad, why := r(v); bad {
			v.ClientBound = true
			v.Reasons = append(v.Reasons, why)
		}
	}
	if v.ClientBound && v.PeakHostCPU >= hostBusy {
		// Not a rule of its own, but the likely cause: say so.
		v.Reasons = append(
			v.Reasons,
			fmt.Sprintf("the host's CPU was %.0f%% busy, so other processes competed with the client", v.PeakHostCPU),
		)
	}
	m.lines.Add(v)
	m.verdicts = append(m.verdicts, v)
	if v.ClientBound && m.warn != nil {
		fmt.Fprintf(
			m.warn,
			"warning: step %s is client-bound, its latencies include the client's own delay: %s\n",
			name,
			v.Reason(),
		)
	}
	return v
}

// rule reports whether a step broke it, and why in plain words.
type rule func(v results.Verdict) (bool, string)

// rules is the client-bound rule table, each bound by the monitor's options.
func (m *Monitor) rules() []rule {
	return []rule{
		// Tokens waited in the socket for the client: measured per chunk
		// from the kernel's receive stamps, so it comes first.
		func(v results.Verdict) (bool, string) {
			d := time.Duration(v.ClientDelayP99MS * 1e6)
			return v.ClientDelayP99MS >= 0 && d > m.maxDelay, fmt.Sprintf(
				"client delay p99 %.2f ms > %.2f ms: tokens waited that long in the socket before the client read them "+
					"(token times come from kernel stamps and stay exact, but the client is behind)",
				v.ClientDelayP99MS,
				ms(m.maxDelay),
			)
		},
		// The process used (nearly) all the cores it may use: requests and
		// token reads queued behind each other inside the client.
		func(v results.Verdict) (bool, string) {
			return v.CPUOfAvailable >= 100*m.cpuShare, fmt.Sprintf(
				"client CPU %.0f%% of %g available cores (limit %.0f%%)", v.CPUOfAvailable, m.cores, 100*m.cpuShare)
		},
		// Requests left later than planned.
		func(v results.Verdict) (bool, string) {
			lag := time.Duration(v.ScheduleLagP99MS * 1e6)
			return v.ScheduleLagP99MS >= 0 && lag > m.maxLag, fmt.Sprintf(
				"schedule lag p99 %.2f ms > %.2f ms: requests were sent late", v.ScheduleLagP99MS, ms(m.maxLag))
		},
		// Goroutines waited for a thread: their timestamps are late by as
		// much. Only a heuristic: where the client's delay was measured
		// from kernel stamps, that figure judges instead.
		func(v results.Verdict) (bool, string) {
			lat := time.Duration(v.SchedLatencyP99MS * 1e6)
			return v.ClientDelayP99MS < 0 && m.maxSched > 0 && lat > m.maxSched, fmt.Sprintf(
				"Go scheduler latency p99 %.2f ms > %.2f ms: goroutines waited to run, so timestamps may be late",
				v.SchedLatencyP99MS,
				ms(m.maxSched),
			)
		},
		// Near the descriptor limit, new connections fail as client errors.
		func(v results.Verdict) (bool, string) {
			return m.fdLimit > 0 && float64(v.PeakFDs) >= DefaultFDShare*float64(m.fdLimit), fmt.Sprintf(
				"%d open file descriptors of a limit of %d (ulimit -n)", v.PeakFDs, m.fdLimit)
		},
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Verdicts returns the verdicts of the steps ended so far, in order.
func (m *Monitor) Verdicts() []results.Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]results.Verdict(nil), m.verdicts...)
}

// Sample takes a sample now, outside the ticker, and buffers it like the others.
func (m *Monitor) Sample() results.ClientSample { return m.sampleNow() }

// CPUSince is the process's CPU time since New, and whether it is known.
func (m *Monitor) CPUSince() (time.Duration, bool) {
	c, ok := processCPU()
	return c - m.cpuBase, ok && m.cpuBaseOK
}

// Stop ends sampling, takes a last sample, writes everything buffered and
// closes the file it opened. It is safe to call more than once; later calls
// return the first call's result.
func (m *Monitor) Stop() error {
	m.stopOnce.Do(func() {
		if err := m.lines.Stop(); err != nil {
			m.stopErr = fmt.Errorf("clientmon: samples: %w", err)
		}
	})
	return m.stopErr
}
