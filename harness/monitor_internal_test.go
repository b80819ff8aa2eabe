package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/clientmon"
)

// The harness hook names the step and passes the harness's schedule lag on.
func TestClientStepMonitor(t *testing.T) {
	t.Parallel()
	m, err := clientmon.New(clientmon.WithInterval(time.Hour), clientmon.WithMaxSchedLatency(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	var mon StepMonitor = clientStepMonitor{m}
	step := StepInfo{Index: 3, Target: "mock", Scenario: "rate", Rate: 50, Start: time.Now()}
	mon.StepStarted(step)
	step.End, step.ScheduleLagP99 = time.Now(), 2500*time.Microsecond
	bound, why := mon.StepEnded(step)
	if !bound || !strings.Contains(why, "schedule lag p99 2.50 ms") {
		t.Fatalf("StepEnded = %v, %q; want bound by schedule lag", bound, why)
	}
	if vs := m.Verdicts(); len(vs) != 1 || vs[0].Step != "3 mock r=50/s" {
		t.Fatalf("verdicts %+v, want one for step \"3 mock r=50/s\"", vs)
	}
}
