package results

import (
	"errors"
	"io"
	"io/fs"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Sample is one reading of one source (NVML, or one scraped /metrics URL):
// one line of gpu.jsonl or server_metrics.jsonl.
type Sample struct {
	// Offset is when the reading began, in ns since the Sampler's start
	// (monotonic), on the same axis as the harness's record offsets.
	Offset int64 `json:"t_ns"`
	// Took is how long the reading took; a scrape's figures describe some
	// instant within [Offset, Offset+Took].
	Took   int64     `json:"took_ns"`
	Time   time.Time `json:"time"`   // wall clock, for people
	Source string    `json:"source"` // "nvml" or the scraped URL
	// Devices holds NVML readings, one per GPU.
	Devices []Device `json:"devices,omitempty"`
	// Metrics holds scraped series, keyed by name and labels in Prometheus
	// text form (`vllm:num_requests_running{model_name="m"}`).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Error is set when the reading failed; the sample then carries no
	// figures but keeps its place on the timeline.
	Error string `json:"error,omitempty"`
	// DroppedBefore counts readings of this source dropped (buffer full)
	// since the previous line written.
	DroppedBefore int64 `json:"dropped_before,omitempty"`
}

// Device is one GPU's state in an NVML reading. A figure the device or
// driver does not support is absent (nil), never a made-up zero.
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	Name  string `json:"name,omitempty"`
	// UtilPercent is NVML's GPU utilisation: the share of the last sample
	// period in which any kernel ran (not SM busy).
	UtilPercent    *float64 `json:"util_percent,omitempty"`
	MemUtilPercent *float64 `json:"mem_util_percent,omitempty"` // memory controller busy
	MemUsedBytes   *uint64  `json:"mem_used_bytes,omitempty"`
	MemTotalBytes  *uint64  `json:"mem_total_bytes,omitempty"`
	PowerW         *float64 `json:"power_w,omitempty"`
	TempC          *float64 `json:"temp_c,omitempty"`
	SMClockMHz     *float64 `json:"sm_clock_mhz,omitempty"`
	MemClockMHz    *float64 `json:"mem_clock_mhz,omitempty"`
	// PowerLimitW is the enforced power limit.
	PowerLimitW *float64 `json:"power_limit_w,omitempty"`
	// ClockEventReasons is NVML's bitmask of why the clocks are below
	// their maximum (nvmlClocksEventReason*: 0x4 SW power cap, 0x8 HW
	// slowdown, 0x20/0x40 SW/HW thermal, 0x80 HW power brake, 0x1 idle).
	ClockEventReasons *uint64 `json:"clock_event_reasons,omitempty"`
	// PCIeTxKBps and PCIeRxKBps are NVML's PCIe throughput counters (KB/s
	// over a 20 ms window).
	PCIeTxKBps *float64 `json:"pcie_tx_kbps,omitempty"`
	PCIeRxKBps *float64 `json:"pcie_rx_kbps,omitempty"`
	// ECCUncorrected is the volatile count of uncorrected ECC errors since
	// the driver loaded; XIDErrors counts XID critical-error events seen
	// by this sampler since it started.
	ECCUncorrected *uint64 `json:"ecc_uncorrected,omitempty"`
	XIDErrors      *uint64 `json:"xid_errors,omitempty"`
	// GPM metrics (Hopper and later) over the interval since the previous
	// reading; absent on the first reading and where GPM is unsupported.
	SMUtilPercent      *float64 `json:"sm_util_percent,omitempty"`
	SMOccupancyPercent *float64 `json:"sm_occupancy_percent,omitempty"`
	DRAMBWUtilPercent  *float64 `json:"dram_bw_util_percent,omitempty"`
	// TensorUtilPercent is GPM's ANY_TENSOR_UTIL: the share of time any
	// tensor-core pipe was busy.
	TensorUtilPercent *float64 `json:"tensor_util_percent,omitempty"`
	// Errors lists the figures that failed with an unexpected NVML error.
	Errors []string `json:"errors,omitempty"`
}

// ReadSamples reads a gpu.jsonl or server_metrics.jsonl file.
func ReadSamples(path string) ([]Sample, error) { return ReadLines[Sample](path) }

// ReadServerSamples reads dir's server_metrics.jsonl and gpu.jsonl, those
// that exist, merged in time order. On a damaged line it returns what was
// read with the error.
func ReadServerSamples(dir string) ([]Sample, error) {
	var out []Sample
	for _, name := range []string{ServerMetricsFile, GPUFile} {
		s, err := ReadSamples(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		out = append(out, s...)
		if err != nil {
			return out, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out, nil
}

// Family sums a sample's series of the first metric family present among
// names (over its label sets), and says whether any was. Names are
// alternatives in order of preference: a server exposing both vLLM's and
// TGI's gauges for the same thing (as the mock does) counts it once.
func (s *Sample) Family(names ...string) (float64, bool) {
	for _, n := range names {
		var sum float64
		found := false
		for k, v := range s.Metrics {
			if SeriesName(k) == n {
				sum += v
				found = true
			}
		}
		if found {
			return sum, true
		}
	}
	return 0, false
}

// SeriesName is the metric name of a series key (`name{labels}`).
func SeriesName(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[:i]
	}
	return key
}

// SourceName shortens a scrape URL to host:port for legends and tables.
func SourceName(src string) string {
	if u, err := url.Parse(src); err == nil && u.Host != "" {
		return u.Host
	}
	return src
}

// DecodeSamples reads Sample lines from r until EOF.
func DecodeSamples(r io.Reader) ([]Sample, error) { return DecodeLines[Sample](r) }
