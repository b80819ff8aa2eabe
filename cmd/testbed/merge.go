package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/report"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(
		command{name: "merge", summary: "merge the shards of a scaled-out run into one results directory and report",
			run: runMerge},
	)
}

// runMerge merges shard directories (globs allowed, for images without a
// shell) and writes the merged run's analysis and report.
func runMerge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "merged results directory (required)")
	maxSkew := fs.Duration("max-skew", 50*time.Millisecond, "flag steps whose shards started further apart than this")
	tol := fs.Float64("window-tolerance", 0.1,
		"flag steps whose shards' windows differ by more than this share of the window (plus one request's drain)")
	var st storeFlags
	st.register(fs, true)
	fs.Usage = func() {
		fmt.Fprintln(
			stderr,
			"usage: testbed merge -o DIR [--max-skew 50ms] [--store LOC] [--baseline RUN] SHARD_DIR...",
		)
		fmt.Fprintln(stderr, "SHARD_DIR may be a glob, expanded by merge itself: 'results/shard-*'")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 || !(*tol > 0) {
		return fmt.Errorf("merge needs -o DIR, shard directories and a positive --window-tolerance: %w", errUsage)
	}
	dirs, err := expandDirs(fs.Args())
	if err != nil {
		return err
	}
	res, err := harness.Merge(
		dirs,
		*out,
		harness.MergeOptions{MaxSkew: *maxSkew, WindowTolerance: *tol, Version: version},
	)
	if err != nil {
		return err
	}
	if err := harness.WriteTable(stdout, res.Summary); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d shards, %d requests merged into %s\n", len(res.Info.Shards), res.Info.Records, *out)
	printSkew(stdout, &res.Info)
	for _, ms := range res.Info.Merge.Steps {
		for _, p := range ms.Problems {
			fmt.Fprintf(stderr, "step %d: %s\n", ms.Step, p)
		}
	}
	r, err := report.Load(*out, analysis.Options{})
	if err != nil {
		return err
	}
	if err := analysis.Write(*out, r.Analysis); err != nil {
		return err
	}
	if err := report.Write(*out, []*report.Run{r}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(*out, results.ReportMarkdown))
	// The merged run is recorded like any run: its plan has no shard
	// section, so it shares its fingerprint with one-process runs of the plan.
	return st.record(ctx, "run", []string{*out}, nil, stdout, stderr)
}

// printSkew gives the largest start spread and the clock error bound.
func printSkew(w io.Writer, info *results.RunInfo[harness.Plan]) {
	var spread, rtt int64
	step := 0
	for _, ms := range info.Merge.Steps {
		if ms.StartSpreadNS > spread {
			spread = ms.StartSpreadNS
			step = ms.Step
		}
	}
	for _, sh := range info.Shards {
		rtt = max(rtt, sh.ClockRTTNS)
	}
	fmt.Fprintf(w, "shard starts spread at most %.3f ms (step %d); clock offsets known to ±%.3f ms\n",
		float64(spread)/1e6, step, float64(rtt)/2e6)
}

// expandDirs expands glob patterns itself: the FROM-scratch image has no
// shell to do it. A pattern matching nothing is an error.
func expandDirs(args []string) ([]string, error) {
	var dirs []string
	for _, a := range args {
		if !strings.ContainsAny(a, "*?[") {
			dirs = append(dirs, a)
			continue
		}
		m, err := filepath.Glob(a)
		if err != nil {
			return nil, fmt.Errorf("merge: %q: %w", a, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("merge: %q matches no directory", a)
		}
		dirs = append(dirs, m...)
	}
	return dirs, nil
}
