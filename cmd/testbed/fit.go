package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/llm-testbed/testbed/calibration/fit"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func init() {
	register(
		command{
			name:    "fit",
			summary: "fit a mock profile (fixed, engine β or load curve) to a results directory",
			run:     runFit,
		},
	)
}

func runFit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "profile YAML to write (default DIR/profile.yaml)")
	target := fs.String("target", "", "target to fit, when the run measured several")
	base := fs.String(
		"base",
		"llama3-8b-h100",
		"preset or profile file supplying what a run cannot show (KV cache, block size, token budget, max_model_len)",
	)
	mode := fs.String(
		"mode",
		fit.ModeAuto,
		"profile mode: fixed, engine, load_curve, or auto (the one that best reproduces held-out steps of the run)",
	)
	name := fs.String("name", "", "profile name (default fitted-<target>)")
	gap := fs.Duration(
		"burst-gap",
		0,
		"gap between two steps' chunk bursts (default: half the shortest typical inter-token gap)",
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed fit DIR [-o profile.yaml] [flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("fit needs exactly one results directory: %w", errUsage)
	}
	dir := fs.Arg(0)
	bp, err := engine.Preset(*base)
	if err != nil {
		if !strings.ContainsAny(*base, "./") {
			return err
		}
		if bp, err = engine.LoadProfile(*base); err != nil {
			return err
		}
	}
	opts := []fit.Option{fit.WithBase(bp), fit.WithTarget(*target), fit.WithMode(*mode), fit.WithName(*name)}
	if *gap > 0 {
		opts = append(opts, fit.WithBurstGap(*gap))
	}
	res, err := fit.Dir(dir, opts...)
	if err != nil {
		return err
	}
	res.Print(stdout)
	path := *out
	if path == "" {
		path = filepath.Join(dir, "profile.yaml")
	}
	if err := res.WriteProfile(path); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (testbed mock --profile %s)\n", path, path)
	return nil
}
