package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/llm-testbed/testbed/calibration/ceiling"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(
		command{
			name:    "calibrate",
			summary: "find this client's ceiling: measurement error against the mock's ground truth at rising load",
			run:     runCalibrate,
		},
	)
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := ceiling.DefaultConfig()
	quick := fs.Bool("quick", false, "short run: c=1,10,100 and 50,200 req/s, 1s per level")
	url := fs.String("url", "", "base URL of a mock running in another process (testbed mock); "+
		"default: start one as a child process")
	inProcess := fs.Bool("in-process", false, "run the mock inside this process, sharing its CPU, garbage collector "+
		"and scheduler (the figures are then the pair's)")
	model := fs.String("model", def.Model, "model name the mock serves")
	out := fs.String("o", "", "results directory (default results/calibrate-<time>)")
	conc := intList(def.Concurrency)
	rates := floatList(def.Rates)
	fs.Var(&conc, "concurrency", "closed-loop ladder, stopped at its first level over a limit")
	fs.Var(&rates, "rate", "open-loop ladder in req/s, stopped at its first level over a limit")
	noRates := fs.Bool("no-rate", false, "skip the rate ladder")
	dur := fs.Duration("duration", def.StepDuration, "measured time per level (after one warm-up round)")
	ttft := fs.Duration("ttft", def.TTFT, "the started mock's TTFT (with --url: the running mock's, for its lateness)")
	itl := fs.Duration("itl", def.ITL, "the started mock's ITL (with --url: the running mock's, for its lateness)")
	in := fs.Int("input-tokens", def.InputTokens, "prompt tokens per request")
	outTok := fs.Int("output-tokens", def.OutputTokens, "output tokens per request")
	maxErr := fs.Duration("max-error", def.MaxError, "limit on measurement error p99")
	maxLag := fs.Duration("max-lag", def.MaxLag, "limit on schedule lag p99")
	cpu := fs.Float64("cpu-limit", def.CPUShare, "limit on client CPU, as a share of the available cores")
	keep := fs.Bool("keep-going", false, "run every level, even past the first over a limit")
	seed := fs.Int64("seed", def.Seed, "seed for requests and arrivals")
	var st storeFlags
	st.register(fs, false)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed calibrate [--url URL] [-o DIR] [--quick] [flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate takes no arguments, got %q: %w", fs.Args(), errUsage)
	}
	cfg := def
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		cfg = ceiling.QuickConfig()
	}
	// Flags given explicitly override --quick.
	for name, apply := range map[string]func(){
		"concurrency": func() { cfg.Concurrency = conc }, "rate": func() { cfg.Rates = rates },
		"duration": func() { cfg.StepDuration = *dur }, "ttft": func() { cfg.TTFT = *ttft }, "itl": func() { cfg.ITL = *itl },
		"input-tokens": func() { cfg.InputTokens = *in }, "output-tokens": func() { cfg.OutputTokens = *outTok },
	} {
		if set[name] {
			apply()
		}
	}
	if *inProcess && *url != "" {
		return fmt.Errorf("calibrate: --in-process and --url name two different mocks: %w", errUsage)
	}
	cfg.InProcess = *inProcess
	if *noRates {
		cfg.Rates = []float64{}
	}
	cfg.URL = *url
	cfg.Model = *model
	cfg.MaxError = *maxErr
	cfg.MaxLag = *maxLag
	cfg.CPUShare = *cpu
	cfg.KeepGoing = *keep
	cfg.Seed = *seed
	cfg.OutDir = resultsDir(*out, "calibrate")
	cfg.Log, cfg.Warnings = stderr, stderr
	rep, err := ceiling.Find(ctx, cfg)
	if rep == nil {
		return err
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	fmt.Fprintf(stdout, "results in %s\n", filepath.Join(cfg.OutDir, results.CalibrationFile))
	// Each load level is a run of its own, with its own results directory.
	if dirs, derr := resultsDirs(cfg.OutDir); derr == nil {
		err = errors.Join(err, st.record(ctx, "calibrate", dirs, err, stdout, stderr))
	}
	return err
}
