package harness

import "time"

// ServerMetrics asks for the servers' Prometheus endpoints (vLLM, TGI, a
// DCGM exporter) to be scraped during the run into server_metrics.jsonl,
// on the run's clock, beside requests.jsonl. The harness only carries this
// section; the caller (testbed run / bench) does the sampling with package
// testbed/gpu.
type ServerMetrics struct {
	URLs     []string `yaml:"urls" json:"urls"`                         // full /metrics URLs
	Interval Duration `yaml:"interval,omitempty" json:"interval"`       // default 1s
	Series   []string `yaml:"series,omitempty" json:"series,omitempty"` // families to keep ("vllm:*" is a prefix); default gpu.DefaultSeries
}

// GPUSampling asks for the local GPUs to be read through NVML during the
// run into gpu.jsonl. It needs the NVIDIA driver and a cgo build of the
// tool; without them the run fails before any load is sent.
type GPUSampling struct {
	NVML     bool     `yaml:"nvml" json:"nvml"`
	Interval Duration `yaml:"interval,omitempty" json:"interval"` // default 1s
}

// WithStart makes Run measure every offset in its records from t instead
// of from its own start, so samplers started just before Run (with the same
// t) share the records' time axis. t must come from time.Now (it carries
// the monotonic reading) and must not be later than the call to Run.
func WithStart(t time.Time) RunOption { return func(o *runOptions) { o.start = t } }
