package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"testbed/harness"
)

func init() {
	register(command{name: "report", summary: "rebuild a run's table from its requests.jsonl", run: runReport})
}

// runReport recomputes the summary from the raw records alone (run.json,
// when present, only supplies the SLOs for goodput).
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: testbed report DIR") }
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("report needs one results directory: %w", errUsage)
	}
	dir := fs.Arg(0)
	recs, err := harness.ReadRecords(filepath.Join(dir, harness.RecordsFile))
	if err != nil {
		return err
	}
	var opts []harness.SummaryOption
	if b, err := os.ReadFile(filepath.Join(dir, harness.RunFile)); err == nil {
		var info harness.RunInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return fmt.Errorf("%s: %w", harness.RunFile, err)
		}
		opts = append(opts, harness.WithSLO(info.Plan.SLO))
	}
	return harness.WriteTable(stdout, harness.Summarize(recs, opts...))
}
