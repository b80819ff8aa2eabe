package results

import (
	"encoding/json"
	"fmt"

	"strings"
	"time"
)

// ClientSample is one observation of the client process, one line of client.jsonl
// (kind "sample"). Interval figures (CPU, GC, scheduler latency) cover the
// time since the previous sample.
type ClientSample struct {
	Kind   string    `json:"kind"`           // always "sample"
	Time   time.Time `json:"time"`           // wall clock, for lining up with other timelines
	T      float64   `json:"t_s"`            // seconds since the monitor started (monotonic)
	Step   string    `json:"step,omitempty"` // the step running when the sample was taken
	Cores  float64   `json:"available_cores"`
	CPU    float64   `json:"process_cpu_percent"`              // 100 = one core busy (gopsutil Process.Percent)
	CPUOf  float64   `json:"process_cpu_of_available_percent"` // CPU / available cores, 0..100
	Host   float64   `json:"host_cpu_percent"`                 // all cores of the host, 0..100
	RSS    uint64    `json:"rss_bytes"`
	Thread int32     `json:"threads"`
	FDs    int32     `json:"fds"`
	Socket int       `json:"sockets"` // inet sockets the process holds

	Goroutines        uint64  `json:"goroutines"`
	GCCycles          uint64  `json:"gc_cycles"`            // completed in the interval
	GCPauseMaxMS      float64 `json:"gc_pause_max_ms"`      // longest stop-the-world pause in the interval
	SchedLatencyP99MS float64 `json:"sched_latency_p99_ms"` // goroutine runnable → running, p99 in the interval

	// Errors names the probes that failed this time; their fields are zero.
	Errors []string `json:"errors,omitempty"`
}

// Verdict is the monitor's judgement of one step, also written to
// client.jsonl (kind "step").
type Verdict struct {
	Kind string `json:"kind"` // always "step"
	Step string `json:"step"`
	// StepIndex is the harness's step index (summary.json "step"); -1 for
	// steps begun with Begin rather than the harness hook.
	StepIndex int     `json:"step_index"`
	Duration  float64 `json:"duration_s"`
	Cores     float64 `json:"available_cores"`
	// CPUPercent is the mean process CPU over the step, 100 = one core.
	CPUPercent float64 `json:"process_cpu_percent"`
	// CPUOfAvailable is CPUPercent over the available cores, 0..100.
	CPUOfAvailable float64 `json:"process_cpu_of_available_percent"`
	// PeakCPUOfAvailable is the highest sampled interval during the step.
	PeakCPUOfAvailable float64 `json:"peak_process_cpu_of_available_percent"`
	PeakHostCPU        float64 `json:"peak_host_cpu_percent"`
	// ScheduleLagP99MS is the harness's figure; -1 when it gave none.
	ScheduleLagP99MS float64 `json:"schedule_lag_p99_ms"`
	// ClientDelayP99MS is the p99 of user-space read time minus kernel
	// receive time over the step's token chunks; -1 without kernel stamps.
	ClientDelayP99MS  float64 `json:"client_delay_p99_ms"`
	SchedLatencyP99MS float64 `json:"sched_latency_p99_ms"`
	GCPauseMaxMS      float64 `json:"gc_pause_max_ms"`
	PeakFDs           int32   `json:"peak_fds"`
	PeakSockets       int     `json:"peak_sockets"`
	PeakGoroutines    uint64  `json:"peak_goroutines"`
	PeakRSS           uint64  `json:"peak_rss_bytes"`
	Samples           int     `json:"samples"`

	ClientBound bool     `json:"client_bound"`
	Reasons     []string `json:"reasons,omitempty"`
}

// Reason is the verdict's reasons as one sentence ("" when not client-bound).
func (v Verdict) Reason() string { return strings.Join(v.Reasons, "; ") }

// clientLine is one line of client.jsonl: a ClientSample or a Verdict,
// told apart by its kind.
type clientLine struct {
	sample  *ClientSample
	verdict *Verdict
}

func (l *clientLine) UnmarshalJSON(b []byte) error {
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	switch head.Kind {
	case "sample":
		l.sample = new(ClientSample)
		return json.Unmarshal(b, l.sample)
	case "step":
		l.verdict = new(Verdict)
		return json.Unmarshal(b, l.verdict)
	}
	return fmt.Errorf("unknown kind %q", head.Kind)
}

// ReadClient reads a client.jsonl written by the client monitor: its
// samples and its step verdicts, in file order. `testbed report` restores
// each step's client_bound flag from the verdicts (their StepIndex is
// summary.json's step), since requests.jsonl does not carry it.
func ReadClient(path string) ([]ClientSample, []Verdict, error) {
	lines, err := ReadLines[clientLine](path)
	var samples []ClientSample
	var verdicts []Verdict
	for _, l := range lines {
		if l.sample != nil {
			samples = append(samples, *l.sample)
		} else {
			verdicts = append(verdicts, *l.verdict)
		}
	}
	return samples, verdicts, err
}
