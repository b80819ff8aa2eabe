package harness

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/llm-testbed/testbed/gpu"
	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"
)

// ServerMetrics asks for the servers' Prometheus endpoints (vLLM, TGI, a
// DCGM exporter) to be scraped during the run into server_metrics.jsonl,
// on the records' clock.
type ServerMetrics struct {
	URLs     []string `yaml:"urls"               json:"urls"`     // full /metrics URLs
	Interval Duration `yaml:"interval,omitempty" json:"interval"` // default 1s
	// families to keep ("vllm:*" is a prefix); default serverside.DefaultSeries
	Series []string `yaml:"series,omitempty"   json:"series,omitempty"`
}

// GPUSampling asks for the local GPUs to be read through NVML during the
// run into gpu.jsonl. It needs the NVIDIA driver and a cgo build of the
// tool; without them the run fails before any load is sent.
type GPUSampling struct {
	NVML     bool     `yaml:"nvml"               json:"nvml"`
	Interval Duration `yaml:"interval,omitempty" json:"interval"` // default 1s
}

// watchers are what Run starts beside the load, all on the records' clock:
// the client monitor (client.jsonl) and the plan's samplers
// (server_metrics.jsonl, gpu.jsonl).
type watchers struct {
	t0       time.Time
	mon      *clientmon.Monitor // nil when the caller owns the monitor, or none runs
	samplers []*serverside.Sampler
	files    []string // each sampler's file
	closers  []func() error
	warn     io.Writer
}

// watch starts the watchers for a run writing into dir; stop ends them.
// It owns nvml (from openNVML, or nil) and closes it.
func watch(plan *Plan, nvml *gpu.NVML, dir string, t0 time.Time, o *runOptions) (*watchers, error) {
	w := &watchers{t0: t0, warn: o.warnings}
	if nvml != nil {
		w.closers = append(w.closers, nvml.Close)
	}
	if w.warn == nil {
		w.warn = io.Discard
	}
	fail := func(err error) (*watchers, error) { return nil, errors.Join(err, w.stop()) }
	mon := o.clientMon
	if mon == nil && !o.noMonitor {
		m, err := clientmon.New(
			clientmon.WithFile(filepath.Join(dir, results.ClientFile)),
			clientmon.WithWarnings(w.warn),
		)
		if err != nil {
			return nil, fmt.Errorf("client monitor: %w", err)
		}
		w.mon = m
		mon = m
	}
	if mon != nil {
		o.monitors = append(o.monitors, clientStepMonitor{mon})
	}
	if sm := plan.ServerMetrics; sm != nil && len(sm.URLs) > 0 {
		if err := w.scrape(sm, dir); err != nil {
			return fail(fmt.Errorf("server_metrics: %w", err))
		}
	}
	if nvml != nil {
		if err := w.readNVML(nvml, plan.GPU, dir); err != nil {
			return fail(fmt.Errorf("gpu: %w", err))
		}
	}
	return w, nil
}

// scrape starts sampling the servers' /metrics into server_metrics.jsonl.
func (w *watchers) scrape(sm *ServerMetrics, dir string) error {
	var opts []serverside.PrometheusOption
	if len(sm.Series) > 0 {
		opts = append(opts, serverside.WithSeries(sm.Series...))
	}
	sources := make([]serverside.Source, 0, len(sm.URLs))
	for _, u := range sm.URLs {
		p, err := serverside.NewPrometheus(u, opts...)
		if err != nil {
			return fmt.Errorf("urls: %w", err)
		}
		sources = append(sources, p)
	}
	return w.sample(sources, sm.Interval, filepath.Join(dir, results.ServerMetricsFile))
}

// openNVML opens NVML when the plan samples the GPUs, before any load or
// network: a host without the driver fails the run at once.
func openNVML(plan *Plan) (*gpu.NVML, error) {
	if plan.GPU == nil || !plan.GPU.NVML {
		return nil, nil
	}
	n, err := gpu.OpenNVML()
	if err != nil {
		return nil, fmt.Errorf("gpu.nvml: %w", err)
	}
	return n, nil
}

func closeNVML(n *gpu.NVML) error {
	if n == nil {
		return nil
	}
	return n.Close()
}

// readNVML starts sampling the local GPUs into gpu.jsonl.
func (w *watchers) readNVML(n *gpu.NVML, g *GPUSampling, dir string) error {
	return w.sample([]serverside.Source{n}, g.Interval, filepath.Join(dir, results.GPUFile))
}

func (w *watchers) sample(sources []serverside.Source, every Duration, path string) error {
	interval := every.D()
	if interval <= 0 {
		interval = serverside.DefaultInterval
	}
	s, err := serverside.NewSampler(w.t0, sources, serverside.WithInterval(interval), serverside.WithFile(path))
	if err != nil {
		return err
	}
	w.samplers = append(w.samplers, s)
	w.files = append(w.files, filepath.Base(path))
	return nil
}

// stop ends every watcher. Dropped or failed readings are a warning, not a
// failed run: the records are what the run measured.
func (w *watchers) stop() error {
	var errs []error
	for i, s := range w.samplers {
		if err := s.Stop(); errors.Is(err, serverside.ErrDropped) {
			fmt.Fprintln(w.warn, "warning:", err)
		} else if err != nil {
			errs = append(errs, err)
		}
		if st := s.Stats(); st.Errors > 0 {
			fmt.Fprintf(w.warn, "warning: %d of %d readings failed; their errors are in %s\n",
				st.Errors, st.Samples, w.files[i])
		}
	}
	for _, c := range w.closers {
		errs = append(errs, c())
	}
	if w.mon != nil {
		errs = append(errs, w.mon.Stop())
	}
	return errors.Join(errs...)
}
