package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/llm-testbed/testbed/gpu"
	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// startPlanSampling starts the server-side samplers plan asks for
// (server_metrics: Prometheus scrapes into server_metrics.jsonl; gpu: NVML
// into gpu.jsonl), with offsets from t0, the run's start. The returned stop
// ends them; dropped readings are a warning on stderr, not a failed run.
func startPlanSampling(plan harness.Plan, dir string, t0 time.Time, stderr io.Writer) (stop func() error, err error) {
	var samplers []*gpu.Sampler
	var files []string // output of each sampler
	var closers []func() error
	stop = func() error {
		var errs []error
		for i, s := range samplers {
			if err := s.Stop(); errors.Is(err, gpu.ErrDropped) {
				fmt.Fprintln(stderr, "warning:", err)
			} else if err != nil {
				errs = append(errs, err)
			}
			if st := s.Stats(); st.Errors > 0 {
				fmt.Fprintf(stderr, "warning: %d of %d readings failed; their errors are in %s\n", st.Errors, st.Samples, files[i])
			}
		}
		for _, c := range closers {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (func() error, error) {
		return nil, errors.Join(err, stop())
	}
	if sm := plan.ServerMetrics; sm != nil && len(sm.URLs) > 0 {
		var opts []gpu.PrometheusOption
		if len(sm.Series) > 0 {
			opts = append(opts, gpu.WithSeries(sm.Series...))
		}
		sources := make([]gpu.Source, 0, len(sm.URLs))
		for _, u := range sm.URLs {
			p, err := gpu.NewPrometheus(u, opts...)
			if err != nil {
				return fail(fmt.Errorf("server_metrics.urls: %w", err))
			}
			sources = append(sources, p)
		}
		s, err := gpu.NewSampler(t0, sources, gpu.WithInterval(interval(sm.Interval)), gpu.WithFile(filepath.Join(dir, results.ServerMetricsFile)))
		if err != nil {
			return fail(fmt.Errorf("server_metrics: %w", err))
		}
		samplers, files = append(samplers, s), append(files, results.ServerMetricsFile)
	}
	if g := plan.GPU; g != nil && g.NVML {
		n, err := gpu.OpenNVML()
		if err != nil {
			return fail(fmt.Errorf("gpu.nvml: %w", err))
		}
		closers = append(closers, n.Close)
		s, err := gpu.NewSampler(t0, []gpu.Source{n}, gpu.WithInterval(interval(g.Interval)), gpu.WithFile(filepath.Join(dir, results.GPUFile)))
		if err != nil {
			return fail(fmt.Errorf("gpu: %w", err))
		}
		samplers, files = append(samplers, s), append(files, results.GPUFile)
	}
	return stop, nil
}

func interval(d harness.Duration) time.Duration {
	if d <= 0 {
		return gpu.DefaultInterval
	}
	return d.D()
}

// samplingFlags are bench's flags for the plan's server_metrics and gpu
// sections, so quick runs get the server-side timeline too.
type samplingFlags struct {
	urls     stringList
	nvml     bool
	interval time.Duration
}

func (f *samplingFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.urls, "server-metrics", "a /metrics URL (vLLM, TGI, DCGM exporter) to scrape during the run into server_metrics.jsonl (repeatable)")
	fs.BoolVar(&f.nvml, "nvml", false, "read the local GPUs through NVML during the run into gpu.jsonl")
	fs.DurationVar(&f.interval, "sample-interval", gpu.DefaultInterval, "period of --server-metrics and --nvml sampling")
}

// apply sets the plan's sampling sections from the flags.
func (f *samplingFlags) apply(p *harness.Plan) {
	if len(f.urls) > 0 {
		p.ServerMetrics = &harness.ServerMetrics{URLs: f.urls, Interval: harness.Duration(f.interval)}
	}
	if f.nvml {
		p.GPU = &harness.GPUSampling{NVML: true, Interval: harness.Duration(f.interval)}
	}
}
