package gpu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Default file names in a results directory.
const (
	GPUFile           = "gpu.jsonl"            // NVML samples
	ServerMetricsFile = "server_metrics.jsonl" // Prometheus scrapes
)

// Sample is one reading of one Source: one line of gpu.jsonl or
// server_metrics.jsonl.
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
	// GPM metrics (Hopper and later) over the interval since the previous
	// reading; absent on the first reading and where GPM is unsupported.
	SMUtilPercent      *float64 `json:"sm_util_percent,omitempty"`
	SMOccupancyPercent *float64 `json:"sm_occupancy_percent,omitempty"`
	DRAMBWUtilPercent  *float64 `json:"dram_bw_util_percent,omitempty"`
	// Errors lists the figures that failed with an unexpected NVML error.
	Errors []string `json:"errors,omitempty"`
}

// ReadSamples reads a JSONL file written by a Sampler.
func ReadSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	defer f.Close()
	s, err := DecodeSamples(f)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// DecodeSamples reads Sample lines from r until EOF.
func DecodeSamples(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return out, err
	}
	return out, nil
}
