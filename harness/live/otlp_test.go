package live

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llm-testbed/testbed/harness/results"
)

// otlpReceiver is a small OTLP/HTTP metrics receiver: it decodes each
// export request (protobuf) and keeps every gauge point by metric name.
type otlpReceiver struct {
	mu     sync.Mutex
	points map[string][]float64
	attrs  map[string]string // the last point's attributes
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req collmetrics.ExportMetricsServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if r.URL.Path != "/v1/metrics" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, p := range m.GetGauge().GetDataPoints() {
					o.points[m.Name] = append(o.points[m.Name], p.GetAsDouble())
					for _, a := range p.Attributes {
						o.attrs[a.Key] = a.Value.GetStringValue()
					}
				}
			}
		}
	}
	out, _ := proto.Marshal(&collmetrics.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestPushSteps: every step's figures reach an OTLP receiver as gauges
// carrying the run and the step's load.
func TestPushSteps(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{points: map[string][]float64{}, attrs: map[string]string{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	steps := []results.StepSummary{
		{Step: 0, Target: "mock", Scenario: "concurrency", Concurrency: 1, Requests: 10, OK: 10,
			TTFT: results.Stats{P50: 101.5}, OutputTokensPerS: 400},
		{Step: 1, Target: "mock", Scenario: "concurrency", Concurrency: 8, Requests: 10, OK: 9,
			TTFT: results.Stats{P50: 140.25}, OutputTokensPerS: 2900},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := PushSteps(ctx, srv.URL+"/v1/metrics", "abcd1234", steps); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, tt := range []struct {
		name string
		want []float64
	}{
		{"testbed.step.ttft.p50", []float64{101.5, 140.25}},        // both steps
		{"testbed.step.output_tokens_per_s", []float64{400, 2900}}, // a rate
		{"testbed.step.errors", []float64{0, 1}},                   // requests − ok
	} {
		got := rcv.points[tt.name]
		if len(got) != 2 || !(sameSet(got, tt.want)) {
			t.Errorf("%s: received %v, want %v", tt.name, got, tt.want)
		}
	}
	if rcv.attrs["run_id"] != "abcd1234" || rcv.attrs["target"] != "mock" || rcv.attrs["load"] == "" {
		t.Errorf("attributes: %v", rcv.attrs)
	}
	if err := PushSteps(ctx, "http://127.0.0.1:1/v1/metrics", "x", steps); err == nil {
		t.Error("a push to a closed port succeeded")
	}
}

func sameSet(a, b []float64) bool {
	seen := map[float64]int{}
	for _, v := range a {
		seen[v]++
	}
	for _, v := range b {
		seen[v]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
