package main

import (
	"flag"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/serverside"
)

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
	fs.DurationVar(&f.interval, "sample-interval", serverside.DefaultInterval, "period of --server-metrics and --nvml sampling")
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
