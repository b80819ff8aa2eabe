package clientmon

import (
	"fmt"

	"github.com/llm-testbed/testbed/harness"
)

// Monitor implements the harness's step hook.
var _ harness.StepMonitor = (*Monitor)(nil)

// StepLabel names a harness step in client.jsonl: index, target and load,
// e.g. "2 mock c=100" or "5 mock r=50".
func StepLabel(s harness.StepInfo) string {
	load := fmt.Sprintf("c=%d", s.Concurrency)
	if s.Concurrency == 0 && s.Rate > 0 {
		load = fmt.Sprintf("r=%g", s.Rate)
	}
	return fmt.Sprintf("%d %s %s", s.Index, s.Target, load)
}

// StepStarted begins watching a harness step.
func (m *Monitor) StepStarted(s harness.StepInfo) { m.Begin(StepLabel(s)) }

// StepEnded judges a harness step, with the harness's schedule lag p99.
func (m *Monitor) StepEnded(s harness.StepInfo) (clientBound bool, reason string) {
	v := m.end(StepLabel(s), s.Index, s.ScheduleLagP99)
	return v.ClientBound, v.Reason()
}
