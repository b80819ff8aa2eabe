package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/live"
)

// liveFlags is --metrics-addr, the run's own Prometheus /metrics, and
// --otlp-endpoint, its per-step results pushed as OpenTelemetry metrics.
type liveFlags struct {
	addr string
	otlp string
}

func (f *liveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(
		&f.otlp,
		"otlp-endpoint",
		"",
		"after the run, push each step's results as OpenTelemetry metrics to this OTLP/HTTP URL, e.g. "+
			"http://collector:4318/v1/metrics",
	)
	fs.StringVar(
		&f.addr,
		"metrics-addr",
		"",
		"serve this run's live Prometheus /metrics on HOST:PORT while it runs, e.g. 127.0.0.1:9400 (off by default)",
	)
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
	*opts = append(
		*opts,
		harness.WithRecordObserver(e.Observe),
		harness.WithProgress(min(liveEvery, prog.interval), show),
	)
	return e.Close, nil
}

// push sends the run's steps to --otlp-endpoint, if given; Ctrl-C does not
// stop it, a minute does.
func (f *liveFlags) push(ctx context.Context, res *harness.Outcome, stdout io.Writer) error {
	if f == nil || f.otlp == "" || res == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := live.PushSteps(ctx, f.otlp, res.Info.RunID, res.Summary.Steps); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %d steps to %s\n", len(res.Summary.Steps), f.otlp)
	return nil
}
