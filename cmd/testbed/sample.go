package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/gpu"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"
)

func init() {
	register(
		command{
			name:    "sample",
			summary: "sample GPUs (NVML) and /metrics endpoints (DCGM, vLLM, TGI) into a JSONL timeline",
			run:     runSample,
		},
	)
}

func runSample(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var urls stringList
	fs.Var(&urls, "prometheus", "a /metrics URL to scrape (repeatable): DCGM exporter, vLLM, TGI")
	useNVML := fs.Bool("nvml", false, "read the local GPUs through NVML (needs the NVIDIA driver and a cgo build)")
	series := fs.String(
		"series",
		"",
		"comma-separated metric families to keep, a trailing * is a prefix (default: DCGM, vLLM and TGI essentials)",
	)
	interval := fs.Duration("interval", serverside.DefaultInterval, "sampling period")
	out := fs.String(
		"o",
		"",
		"output JSONL file (default "+results.ServerMetricsFile+", or "+results.GPUFile+" with --nvml alone)",
	)
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	fs.Usage = func() {
		fmt.Fprintln(
			stderr,
			"usage: testbed sample [--prometheus URL ...] [--nvml] [--interval 1s] [-o FILE] [--duration D]",
		)
		fmt.Fprintln(
			stderr,
			"Each line: t_ns (since the command started), source, and devices (NVML) or metrics (scrapes).",
		)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("sample: unexpected arguments %q: %w", fs.Args(), errUsage)
	case len(urls) == 0 && !*useNVML:
		return fmt.Errorf("sample: nothing to sample: give --prometheus URL and/or --nvml: %w", errUsage)
	case *duration < 0:
		return fmt.Errorf("sample: --duration %v must not be negative: %w", *duration, errUsage)
	}
	start := time.Now()
	sources, closeAll, err := openSources(urls, *useNVML, *series)
	if err != nil {
		return err
	}
	defer closeAll()
	path := *out
	if path == "" {
		path = results.ServerMetricsFile
		if len(urls) == 0 {
			path = results.GPUFile
		}
	}
	s, err := serverside.NewSampler(start, sources, serverside.WithInterval(*interval), serverside.WithFile(path))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sampling %d source(s) every %v into %s\n", len(sources), *interval, path)
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	<-ctx.Done()
	serr := s.Stop()
	st, _ := json.Marshal(s.Stats())
	fmt.Fprintf(stdout, "sampled into %s: %s\n", path, st)
	return serr
}

// openSources opens the requested sources; close releases NVML.
func openSources(urls []string, useNVML bool, series string) ([]serverside.Source, func(), error) {
	var opts []serverside.PrometheusOption
	if series != "" {
		opts = append(opts, serverside.WithSeries(strings.Split(series, ",")...))
	}
	var sources []serverside.Source
	for _, u := range urls {
		p, err := serverside.NewPrometheus(u, opts...)
		if err != nil {
			return nil, nil, err
		}
		sources = append(sources, p)
	}
	closeAll := func() {}
	if useNVML {
		n, err := gpu.OpenNVML()
		if err != nil {
			return nil, nil, err
		}
		sources = append(sources, n)
		closeAll = func() { _ = n.Close() }
	}
	return sources, closeAll, nil
}
