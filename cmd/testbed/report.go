package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/report"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(
		command{
			name:    "report",
			summary: "rebuild runs' tables from requests.jsonl and write report.md, report.html, analysis.json",
			run:     runReport,
		},
	)
}

// runReport recomputes each run's summary from its raw records alone
// (run.json, when present, only supplies the SLOs for goodput) and prints
// its table; then it writes analysis.json into each results directory and
// report.md and report.html, covering every run given, into -o (default:
// the first directory).
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "directory for report.md and report.html (default: the first DIR)")
	charts := fs.String("svg", "", "also write every chart as a standalone SVG file into this directory")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed report [-o OUTDIR] [-svg CHARTDIR] DIR [DIR...]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return fmt.Errorf("report needs one results directory or more: %w", errUsage)
	}
	var runs []*report.Run
	for _, dir := range fs.Args() {
		if fs.NArg() > 1 {
			fmt.Fprintf(stdout, "%s\n", dir)
		}
		r, err := report.Load(dir, analysis.Options{})
		if err != nil {
			return err
		}
		// What was damaged or missing is said before the figures, which
		// come from the records alone.
		for _, n := range r.Notes {
			fmt.Fprintf(stderr, "warning: %s: %s\n", dir, n)
		}
		if err := harness.WriteTable(stdout, r.Summary); err != nil {
			return err
		}
		if err := analysis.Write(dir, r.Analysis); err != nil {
			return err
		}
		runs = append(runs, r)
	}
	dst := *out
	if dst == "" {
		dst = fs.Arg(0)
	} else if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := report.Write(dst, runs); err != nil {
		return err
	}
	fmt.Fprintf(
		stdout,
		"\nreport: %s, %s\n",
		filepath.Join(dst, results.ReportMarkdown),
		filepath.Join(dst, results.ReportHTML),
	)
	if *charts != "" {
		paths, err := report.WriteCharts(*charts, runs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "charts: %d SVG files in %s\n", len(paths), *charts)
	}
	return nil
}
