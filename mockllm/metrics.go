package mockllm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	// latenessBuckets resolve the sub-millisecond range the mock promises;
	// 0.001 is a boundary so "p99 ≤ 1 ms" is read exactly.
	latenessBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001,
		0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
)

// metrics are one server's Prometheus collectors, on its own registry so
// tests can run many servers in one process.
type metrics struct {
	reg *prometheus.Registry

	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
	success      *prometheus.CounterVec // finished_reason
	ttft         prometheus.Observer
	itl          prometheus.Observer
	e2e          prometheus.Observer
	queue        prometheus.Observer
	prefill      prometheus.Observer
	decode       prometheus.Observer
	lateness     prometheus.Observer
	faults       *prometheus.CounterVec // fault
	rejected     *prometheus.CounterVec // reason
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	model := prometheus.Labels{"model_name": s.model}
	m := &metrics{reg: reg}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(
			prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: model},
		)
		reg.MustRegister(h)
		return h
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: model})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, labels prometheus.Labels, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Count of successfully processed requests.", ConstLabels: model}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	for _, r := range []string{finishStop, finishLength, finishAbort} {
		m.success.WithLabelValues(r)
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:num_preemptions_total",
		Help: "Cumulative number of preemption from the engine.", ConstLabels: model},
		func() float64 { return float64(s.sched.Stats().Preemptions) }))
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", model,
		func() float64 { return float64(s.sched.Stats().Running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", model,
		func() float64 { return float64(s.sched.Stats().Waiting) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", model,
		func() float64 { return s.sched.Stats().KVCacheUsage })
	gauge("tgi_queue_size", "Number of requests waiting in the internal queue.", nil,
		func() float64 { return float64(s.sched.Stats().Waiting) })
	gauge("tgi_batch_current_size", "Current batch size.", nil,
		func() float64 { return float64(s.sched.Stats().Running) })

	if g, ok := s.sched.(engine.GPUReporter); ok {
		registerGPU(reg, g)
	}

	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.e2e = hist(
		"vllm:e2e_request_latency_seconds",
		"Histogram of e2e request latency in seconds.",
		requestLatencyBuckets,
	)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
		requestLatencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
		requestLatencyBuckets)
	m.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
		requestLatencyBuckets)
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "testbed_mock_emission_lateness_seconds",
		Help:    "Time from a token chunk's scheduled due time to the start of its write to the connection.",
		Buckets: latenessBuckets})
	reg.MustRegister(lat)
	m.lateness = lat
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "testbed_mock_faults_total",
		Help: "Faults injected, by kind."}, []string{"fault"})
	reg.MustRegister(m.faults)
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "testbed_mock_rejected_total",
		Help: "Requests refused before generation, by reason."}, []string{"reason"})
	reg.MustRegister(m.rejected)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "testbed_mock_truth_evictions_total",
		Help: "Ground-truth records evicted from the bounded store."},
		func() float64 { return float64(s.truth.evictions()) }))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observeEnd records the request-level histograms of a finished request.
func (m *metrics) observeEnd(tr *Truth, dequeued time.Time, arrival time.Time) {
	m.success.WithLabelValues(tr.FinishReason).Inc()
	sec := func(ns int64) float64 { return float64(ns) / 1e9 }
	m.e2e.Observe(sec(tr.LastTokenNS - tr.ArrivalNS))
	if !dequeued.IsZero() {
		m.queue.Observe(dequeued.Sub(arrival).Seconds())
	}
	if tr.FirstTokenNS > 0 {
		m.prefill.Observe(sec(tr.FirstTokenNS - tr.DequeuedNS))
		m.decode.Observe(sec(tr.LastTokenNS - tr.FirstTokenNS))
	}
}

// gpuLabels are the labels dcgm-exporter puts on every series of GPU 0.
var gpuLabels = prometheus.Labels{"gpu": "0", "UUID": "GPU-00000000-0000-0000-0000-000000000000",
	"device": "nvidia0", "modelName": "testbed mock GPU", "Hostname": "mock"}

// registerGPU exposes the engine's modelled GPU under dcgm-exporter's
// names and units, so a ladder against the mock exercises GPU sampling
// and the saturation verdict as on a GPU host (docs/saturation.md).
func registerGPU(reg *prometheus.Registry, g engine.GPUReporter) {
	const mib = 1 << 20
	for _, f := range []struct {
		name, help string
		get        func(engine.GPUState) float64
	}{
		{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", func(s engine.GPUState) float64 { return 100 * s.Util }},
		{"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %).",
			func(s engine.GPUState) float64 { return s.SMActive }},
		{"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM (in %).",
			func(s engine.GPUState) float64 { return s.SMOccupancy }},
		{"DCGM_FI_PROF_DRAM_ACTIVE",
			"Ratio of cycles the device memory interface is active sending or receiving data (in %).",
			func(s engine.GPUState) float64 { return s.DRAMActive }},
		{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
			func(s engine.GPUState) float64 { return float64(int64(s.FBUsedBytes / mib)) }},
		{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
			func(s engine.GPUState) float64 { return float64(int64((s.FBTotalBytes - s.FBUsedBytes) / mib)) }},
		{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", func(s engine.GPUState) float64 { return s.PowerW }},
		{"DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).",
			func(s engine.GPUState) float64 { return s.PowerLimitW }},
		{"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", func(s engine.GPUState) float64 { return s.SMClockMHz }},
		{"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).",
			func(s engine.GPUState) float64 { return s.MemClockMHz }},
	} {
		get := f.get
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: f.name, Help: f.help, ConstLabels: gpuLabels},
				func() float64 { return get(g.GPU()) }),
		)
	}
}
