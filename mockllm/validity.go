package mockllm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// validityWatch warns when the mock is driven outside the range its
// profile was fitted on (engine.Validity): once per dimension and
// direction as a line on the warnings writer, and for every such request
// in testbed_mock_outside_validity_total. A fitted profile's latencies
// outside that range are extrapolated, not measured, and a user comparing
// the mock with the real server there should know.
type validityWatch struct {
	v       engine.Validity
	out     io.Writer
	counter *prometheus.CounterVec // dimension, direction

	// generating counts requests from before Start until their last token
	// is written, so a closed-loop client's next request, sent when it has
	// read the end of the stream, never finds the last one still counted.
	generating atomic.Int64

	mu     sync.Mutex
	warned map[string]bool
}

func newValidityWatch(v engine.Validity, out io.Writer, reg *prometheus.Registry) *validityWatch {
	w := &validityWatch{v: v, out: out, warned: map[string]bool{}}
	w.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "testbed_mock_outside_validity_total",
		Help: "Requests that arrived outside the load or prompt lengths the profile was fitted on."},
		[]string{"dimension", "direction"})
	reg.MustRegister(w.counter)
	return w
}

// arrive counts a request starting generation with prompt tokens and
// checks it against the range; leave must follow.
func (w *validityWatch) arrive(prompt int) {
	n := int(w.generating.Add(1))
	if !w.v.Stated() {
		return
	}
	for _, c := range []struct{ inFlight, prompt int }{{n, 0}, {0, prompt}} {
		v := w.v
		if c.inFlight == 0 {
			v.MinInFlight, v.MaxInFlight = 0, 0
		} else {
			v.MinPromptTokens, v.MaxPromptTokens = 0, 0
		}
		dim, dir, out := v.Outside(c.inFlight, c.prompt)
		if out {
			w.outside(dim, dir, n, prompt)
		}
	}
}

// leave ends a request's count.
func (w *validityWatch) leave() { w.generating.Add(-1) }

// outside books one request outside the range, and warns the first time.
func (w *validityWatch) outside(dim, dir string, n, prompt int) {
	w.counter.WithLabelValues(dim, dir).Inc()
	w.mu.Lock()
	first := !w.warned[dim+dir]
	w.warned[dim+dir] = true
	w.mu.Unlock()
	if !first || w.out == nil {
		return
	}
	v := w.v
	lo, hi, got, what := v.MinInFlight, v.MaxInFlight, n, "requests in flight"
	if dim == "prompt_tokens" {
		lo, hi, got, what = v.MinPromptTokens, v.MaxPromptTokens, prompt, "prompt tokens"
	}
	fmt.Fprintf(w.out, "testbed mock: warning: %d %s, %s the %d–%d the profile was fitted on: "+
		"its latencies here are extrapolated, not measured (counted in testbed_mock_outside_validity_total; "+
		"warned once)\n", got, what, dir, lo, hi)
}
