package harness_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
)

// verdicts is a StepMonitor that calls the second step client-bound.
type verdicts struct {
	mu      sync.Mutex
	started []harness.StepInfo
	ended   []harness.StepInfo
}

func (v *verdicts) StepStarted(s harness.StepInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.started = append(v.started, s)
}

func (v *verdicts) StepEnded(s harness.StepInfo) (bool, string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ended = append(v.ended, s)
	return s.Index == 1, "test verdict"
}

func TestStepMonitor(t *testing.T) {
	t.Parallel()
	_, srv := fixedMock(t, 5*time.Millisecond, time.Millisecond)
	p := basePlan(srv.URL)
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
	p.Load = harness.Load{Concurrency: []int{1, 2}, Requests: 4}
	v := &verdicts{}
	res, err := harness.Run(
		context.Background(),
		p,
		t.TempDir(),
		harness.WithStepMonitor(v),
		harness.WithoutClientMonitor(),
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.started) != 2 || len(v.ended) != 2 {
		t.Fatalf("monitor saw %d starts and %d ends, want 2 and 2", len(v.started), len(v.ended))
	}
	for i, e := range v.ended {
		if e.Index != i || e.Target != "mock" || e.Concurrency != i+1 || !e.End.After(e.Start) ||
			e.ScheduleLagP99 <= 0 {
			t.Errorf("StepEnded %d got %+v", i, e)
		}
	}
	s := res.Summary.Steps
	if s[0].ClientBound || !s[1].ClientBound || s[1].ClientBoundReason != "test verdict" {
		t.Errorf("client_bound: step 0 %v, step 1 %v %q", s[0].ClientBound, s[1].ClientBound, s[1].ClientBoundReason)
	}
}
