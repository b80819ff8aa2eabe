package gpu

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The agent exports device readings under the DCGM exporter's names and
// units, so a harness on another host scrapes it with a Prometheus source
// and serverside.DefaultSeries, exactly as it would a DCGM exporter.
var agentMetrics = []struct {
	name, help string
	value      func(d results.Device) (float64, bool)
}{
	{
		"DCGM_FI_DEV_GPU_UTIL",
		"GPU utilization (in %): share of time a kernel ran (NVML).",
		func(d results.Device) (float64, bool) { return f(d.UtilPercent) },
	},
	{
		"DCGM_FI_DEV_MEM_COPY_UTIL",
		"Memory utilization (in %) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.MemUtilPercent) },
	},
	{
		"DCGM_FI_DEV_FB_USED",
		"Framebuffer memory used (in MiB) (NVML).",
		func(d results.Device) (float64, bool) { return mib(d.MemUsedBytes) },
	},
	{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB) (NVML).", func(d results.Device) (float64, bool) {
		if d.MemUsedBytes == nil || d.MemTotalBytes == nil {
			return 0, false
		}
		return float64(*d.MemTotalBytes-*d.MemUsedBytes) / (1 << 20), true
	}},
	{
		"DCGM_FI_DEV_POWER_USAGE",
		"Power draw (in W) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.PowerW) },
	},
	{
		"DCGM_FI_DEV_GPU_TEMP",
		"GPU temperature (in C) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.TempC) },
	},
	{
		"DCGM_FI_DEV_SM_CLOCK",
		"SM clock frequency (in MHz) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.SMClockMHz) },
	},
	{
		"DCGM_FI_DEV_MEM_CLOCK",
		"Memory clock frequency (in MHz) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.MemClockMHz) },
	},
	{
		"DCGM_FI_DEV_POWER_MGMT_LIMIT",
		"Enforced power limit (in W) (NVML).",
		func(d results.Device) (float64, bool) { return f(d.PowerLimitW) },
	},
	{
		"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
		"Bitmask of why the clocks are held down (NVML clock-event reasons).",
		func(d results.Device) (float64, bool) { return u64(d.ClockEventReasons) },
	},
	{
		"DCGM_FI_PROF_PCIE_TX_BYTES",
		"PCIe transmit throughput (in B/s) (NVML, 20 ms window).",
		func(d results.Device) (float64, bool) { return scaled(d.PCIeTxKBps, 1000) },
	},
	{
		"DCGM_FI_PROF_PCIE_RX_BYTES",
		"PCIe receive throughput (in B/s) (NVML, 20 ms window).",
		func(d results.Device) (float64, bool) { return scaled(d.PCIeRxKBps, 1000) },
	},
	{
		"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
		"Uncorrected (double-bit) ECC errors since the driver loaded (NVML, volatile).",
		func(d results.Device) (float64, bool) { return u64(d.ECCUncorrected) },
	},
	{
		"testbed_gpu_xid_errors_total",
		"XID critical-error events seen by the agent since it started (NVML events).",
		func(d results.Device) (float64, bool) { return u64(d.XIDErrors) },
	},
	{
		"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
		"Ratio of cycles any tensor pipe is active, from NVML GPM ANY_TENSOR_UTIL since the previous scrape.",
		func(d results.Device) (float64, bool) { return ratio(d.TensorUtilPercent) },
	},
	{
		"DCGM_FI_PROF_SM_ACTIVE",
		"Ratio of SM busy time, from NVML GPM SM_UTIL since the previous scrape.",
		func(d results.Device) (float64, bool) { return ratio(d.SMUtilPercent) },
	},
	{
		"DCGM_FI_PROF_SM_OCCUPANCY",
		"Ratio of warps resident on an SM, from NVML GPM SM_OCCUPANCY since the previous scrape.",
		func(d results.Device) (float64, bool) { return ratio(d.SMOccupancyPercent) },
	},
	{
		"DCGM_FI_PROF_DRAM_ACTIVE",
		"Ratio of DRAM bandwidth used, from NVML GPM DRAM_BW_UTIL since the previous scrape.",
		func(d results.Device) (float64, bool) { return ratio(d.DRAMBWUtilPercent) },
	},
}

func f(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

func u64(p *uint64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return float64(*p), true
}

func scaled(p *float64, k float64) (float64, bool) {
	v, ok := f(p)
	return v * k, ok
}

func ratio(p *float64) (float64, bool) {
	v, ok := f(p)
	return v / 100, ok
}

func mib(p *uint64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return float64(*p) / (1 << 20), true
}

// agentLabels are DCGM's device labels; all bounded by the device count.
var agentLabels = []string{"gpu", "UUID", "modelName"}

// readerSource is a Source that keeps interval state per reader (NVML's
// GPM), so each scraper gets figures over its own interval.
type readerSource interface {
	ReadFor(ctx context.Context, s *results.Sample, reader string) error
}

// deviceCollector reads a device Source on every scrape.
type deviceCollector struct {
	src     serverside.Source
	timeout time.Duration
	// mu serialises scrapes so reader names the scraper Collect serves.
	mu      sync.Mutex
	reader  string
	descs   []*prometheus.Desc
	errDesc *prometheus.Desc
	errors  prometheus.Counter
}

// NewAgent returns an http.Handler serving src's device readings (an NVML
// source) as Prometheus metrics with DCGM exporter names, reading src once
// per scrape (bounded by timeout). It is the small agent for a GPU host that
// runs no DCGM exporter: `testbed gpu-agent` serves it, and the harness
// scrapes it remotely. A failed reading is counted in
// testbed_gpu_agent_read_errors_total and leaves the device metrics out of
// that scrape rather than reporting zeros.
func NewAgent(src serverside.Source, timeout time.Duration) http.Handler {
	c := &deviceCollector{src: src, timeout: timeout,
		errors: prometheus.NewCounter(
			prometheus.CounterOpts{Name: "testbed_gpu_agent_read_errors_total", Help: "Device readings that failed."},
		),
	}
	for _, m := range agentMetrics {
		c.descs = append(c.descs, prometheus.NewDesc(m.name, m.help, agentLabels, nil))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reader = scraperOf(r)
		h.ServeHTTP(w, r)
	})
}

// scraperOf names a scraper by its address (without the port, which
// changes with every connection) and user agent: a Prometheus server and
// the harness on one host stay apart.
func scraperOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return host + " " + r.UserAgent()
}

func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	c.errors.Describe(ch)
}

func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var s results.Sample
	read := c.src.Read
	if rs, ok := c.src.(readerSource); ok {
		read = func(ctx context.Context, s *results.Sample) error { return rs.ReadFor(ctx, s, c.reader) }
	}
	// The error counter is collected here, after the reading, so a scrape
	// counts its own failure (a registry gathers collectors concurrently).
	defer c.errors.Collect(ch)
	if err := read(ctx, &s); err != nil {
		c.errors.Inc()
		return
	}
	for _, d := range s.Devices {
		labels := []string{strconv.Itoa(d.Index), d.UUID, d.Name}
		for i, m := range agentMetrics {
			if v, ok := m.value(d); ok {
				ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.GaugeValue, v, labels...)
			}
		}
	}
}
