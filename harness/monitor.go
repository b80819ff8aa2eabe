package harness

import (
	"fmt"
	"time"

	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
)

// StepInfo identifies one step of a run for a StepMonitor.
type StepInfo struct {
	Index       int       // position of the step in the run, from 0
	Target      string    // target name
	Scenario    string    // e.g. "concurrency" or "rate"
	Concurrency int       // closed-loop workers; 0 for open loop
	Rate        float64   // open-loop requests per second; 0 for closed loop
	Start       time.Time // when the step began (wall and monotonic)
	End         time.Time // when the step ended; zero in StepStarted
	// ScheduleLagP99 is the p99 of send − intended time over the step's
	// requests (warm-up included: the client's delay matters there too);
	// set in StepEnded, so a monitor can flag a client that sent late.
	ScheduleLagP99 time.Duration
	// ClientDelayP99 is the p99 over the step's token chunks of user-space
	// read time minus the kernel's receive stamp (warm-up included): the
	// client's own delay, measured; -1 when no chunk carried a kernel stamp.
	ClientDelayP99 time.Duration
}

// StepMonitor watches the client process during each step, so a result can
// say whether the client itself was the bottleneck. Run calls StepStarted
// before the step's first request and StepEnded after its last response;
// the verdict lands in the step's summary as client_bound and
// client_bound_reason. Calls come from one goroutine, in step order.
type StepMonitor interface {
	StepStarted(step StepInfo)
	StepEnded(step StepInfo) (clientBound bool, reason string)
}

// clientStepMonitor reports a run's steps to the client monitor.
type clientStepMonitor struct{ m *clientmon.Monitor }

// clientStepLabel names a step in client.jsonl: index, target and load,
// e.g. "2 mock c=100" or "5 mock r=50/s".
func clientStepLabel(s StepInfo) string {
	return fmt.Sprintf("%d %s %s", s.Index, s.Target, results.LoadLabel(s.Concurrency, s.Rate))
}

func (c clientStepMonitor) StepStarted(s StepInfo) { c.m.Begin(clientStepLabel(s)) }

func (c clientStepMonitor) StepEnded(s StepInfo) (clientBound bool, reason string) {
	v := c.m.EndStepFigures(clientStepLabel(s), s.Index,
		clientmon.StepFigures{ScheduleLagP99: s.ScheduleLagP99, ClientDelayP99: s.ClientDelayP99})
	return v.ClientBound, v.Reason()
}
