package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/live"
)

// liveFlags is --metrics-addr: the run's own Prometheus /metrics.
type liveFlags struct{ addr string }

func (f *liveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "metrics-addr", "", "serve this run's live Prometheus /metrics on HOST:PORT while it runs, e.g. 127.0.0.1:9400 (off by default)")
}

// liveEvery is how often in-flight and step gauges are refreshed.
const liveEvery = time.Second

// start serves the metrics and adds the options that feed them; stop
// ends serving. The progress line keeps its own pace.
func (f *liveFlags) start(opts *[]harness.RunOption, prog *progress, stderr io.Writer) (stop func() error, err error) {
	if f == nil || f.addr == "" {
		return func() error { return nil }, nil
	}
	e := live.New()
	addr, err := e.Serve(f.addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	fmt.Fprintf(stderr, "live metrics at http://%s/metrics\n", addr)
	var last time.Time
	show := func(p harness.Progress) {
		e.Progress(p)
		if time.Since(last) >= prog.interval {
			last = time.Now()
			prog.show(p)
		}
	}
	*opts = append(*opts, harness.WithRecordObserver(e.Observe), harness.WithProgress(min(liveEvery, prog.interval), show))
	return e.Close, nil
}
