// Package live serves a run's own Prometheus metrics while it runs, so a
// team's Prometheus and Grafana can watch a long soak: requests by class,
// requests in flight, TTFT / ITL / E2E and schedule-lag histograms, output
// tokens (rate() of the counter is tokens/s), the running step, and the
// client process's CPU and memory.
//
// Records reach the Exporter through harness.WithRecordObserver, on the
// run's one writer goroutine after each record is written, so the request
// goroutines never wait on it; progress (in flight, step) through
// harness.WithProgress.
package live

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// Exporter holds a run's live metrics.
type Exporter struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	outTokens *prometheus.CounterVec
	inFlight  prometheus.Gauge
	step      prometheus.Gauge
	ttft      *prometheus.HistogramVec
	itl       *prometheus.HistogramVec
	e2e       *prometheus.HistogramVec
	lag       *prometheus.HistogramVec
	srv       *http.Server
	served    chan error
}

// New returns an Exporter with every metric registered.
func New() *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry()}
	e.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "testbed_requests_total",
		Help: "Finished requests by target and class: ok, or the error class (timeout, rate_limited, …)."},
		[]string{"target", "class"})
	e.outTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "testbed_output_tokens_total",
		Help: "Output tokens of successful requests; rate() of it is tokens/s."}, []string{"target"})
	e.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "testbed_requests_in_flight",
		Help: "Requests sent and not finished."})
	e.step = prometheus.NewGauge(prometheus.GaugeOpts{Name: "testbed_step",
		Help: "Index of the running step, from 0."})
	hist := func(name, help string, lo, hi float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help,
			Buckets: prometheus.ExponentialBucketsRange(lo, hi, 24)}, []string{"target"})
	}
	e.ttft = hist("testbed_ttft_seconds", "Time to first token of successful measured requests.", 1e-3, 120)
	e.itl = hist("testbed_itl_seconds", "Gaps between token-carrying chunks, per token.", 1e-4, 10)
	e.e2e = hist("testbed_e2e_seconds", "Send to last token of successful measured requests.", 1e-3, 1200)
	e.lag = hist("testbed_schedule_lag_seconds", "Send minus intended send time: the client's own delay.", 1e-6, 10)
	e.reg.MustRegister(e.requests, e.outTokens, e.inFlight, e.step, e.ttft, e.itl, e.e2e, e.lag,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return e
}

// Observe counts a finished record. Warm-up requests count in the request
// and token totals but stay out of the latency histograms, as in the
// summary.
func (e *Exporter) Observe(r *results.Record) {
	class := "ok"
	if !r.OK() {
		class = string(r.ErrorClass)
	}
	e.requests.WithLabelValues(r.Target, class).Inc()
	if r.SentNS > 0 {
		e.lag.WithLabelValues(r.Target).Observe(seconds(r.SentNS - r.IntendedNS))
	}
	if !r.OK() {
		return
	}
	e.outTokens.WithLabelValues(r.Target).Add(float64(r.NOut))
	if r.Warmup {
		return
	}
	if r.FirstTokenNS > 0 {
		e.ttft.WithLabelValues(r.Target).Observe(seconds(r.FirstTokenNS - r.SentNS))
	}
	if r.LastTokenNS > 0 {
		e.e2e.WithLabelValues(r.Target).Observe(seconds(r.LastTokenNS - r.SentNS))
	}
	itl := e.itl.WithLabelValues(r.Target)
	for i, g := range r.ChunkGapsNS {
		k := 1
		if r.ChunkTokens != nil && i+1 < len(r.ChunkTokens) {
			k = max(1, int(r.ChunkTokens[i+1]))
		}
		for range k {
			itl.Observe(seconds(g) / float64(k))
		}
	}
}

func seconds(ns int64) float64 { return float64(max(ns, 0)) / 1e9 }

// Progress takes the run's progress: requests in flight and the step.
func (e *Exporter) Progress(p harness.Progress) {
	e.inFlight.Set(float64(p.InFlight))
	e.step.Set(float64(p.Step))
}

// Handler serves the metrics in Prometheus's text format.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg})
}

// Serve serves /metrics on addr (host:port; port 0 picks one) until
// Close, and returns the address it listens on.
func (e *Exporter) Serve(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.served = make(chan error, 1)
	go func() { e.served <- e.srv.Serve(ln) }()
	return ln.Addr(), nil
}

// Close stops serving.
func (e *Exporter) Close() error {
	if e.srv == nil {
		return nil
	}
	err := e.srv.Close()
	if serr := <-e.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// Options are the harness.Run options that feed the exporter; every
// is how often progress (in flight, step) is read.
func (e *Exporter) Options(every time.Duration) []harness.RunOption {
	return []harness.RunOption{harness.WithRecordObserver(e.Observe), harness.WithProgress(every, e.Progress)}
}
