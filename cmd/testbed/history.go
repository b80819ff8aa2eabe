package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/history"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(
		command{
			name:    "history",
			summary: "the results store: ls, show RUN, import DIR..., trend --metric M",
			run:     runHistory,
		},
	)
}

func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	subs := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"ls": historyLs, "show": historyShow, "import": historyImport, "trend": historyTrend,
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: testbed history ls|show|import|trend [flags]\n\n"+
			"  ls [--target T --scenario S --since D]   stored runs, oldest first\n"+
			"  show RUN                                  one run: setup, knees, step table\n"+
			"  import DIR...                             store results directories (again: a no-op)\n"+
			"  trend --metric ttft_p99 [--target T --scenario S] [-o FILE.html]\n"+
			"                                            one metric over runs, regressions marked\n\n"+
			"Every subcommand takes --store PATH|URL (default $"+storeEnv+", else the user's data directory).")
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	sub, ok := subs[args[0]]
	if !ok {
		return fmt.Errorf("history: unknown subcommand %q (ls, show, import, trend): %w", args[0], errUsage)
	}
	return sub(ctx, args[1:], stdout, stderr)
}

// sinceFlag parses --since: a date (2026-01-31), an RFC 3339 time, or a
// duration back from now (7d, 36h).
type sinceFlag struct{ t time.Time }

func (f *sinceFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *sinceFlag) Set(v string) error {
	t, err := parseSince(v, time.Now())
	if err != nil {
		return err
	}
	f.t = t
	return nil
}

func parseSince(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02", v, time.Local); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && n >= 0 && fmt.Sprint(n) == days {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want a date (2026-01-31), a time (RFC 3339) or how long ago (7d, 36h)", v)
}

func historyFlags(name string, stderr io.Writer, st *storeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("history "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	st.registerLocation(fs)
	return fs
}

func openStore(ctx context.Context, st *storeFlags) (*history.Store, error) {
	s, _, err := st.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("results store: %w", err)
	}
	return s, nil
}

func historyLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var st storeFlags
	fs := historyFlags("ls", stderr, &st)
	var f history.Filter
	var since sinceFlag
	fs.StringVar(&f.Target, "target", "", "only runs with a step against this target")
	fs.StringVar(&f.Scenario, "scenario", "", "only runs with a step of this scenario")
	fs.Var(&since, "since", "only runs started since: 2026-01-31, an RFC 3339 time, or 7d / 36h ago")
	fs.StringVar(&f.Status, "status", "", "only runs with this status: complete, interrupted, failed, incomplete")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("history ls takes no arguments, got %q: %w", fs.Args(), errUsage)
	}
	f.Since = since.t
	s, err := openStore(ctx, &st)
	if err != nil {
		return err
	}
	defer s.Close()
	es, err := s.List(ctx, f)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tstarted (UTC)\tkind\tstatus\tname\ttargets\tscenarios\tsteps\trequests\tfingerprint")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", e.ID, e.Start.UTC().Format("2006-01-02 15:04:05"),
			e.Kind, e.Status, dash(e.Name), dash(e.Targets), dash(e.Scenarios), e.Steps, e.Requests, e.Fingerprint)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d runs in %s\n", len(es), s)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func historyShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var st storeFlags
	fs := historyFlags("show", stderr, &st)
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("history show needs one run id: %w", errUsage)
	}
	s, err := openStore(ctx, &st)
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := s.Get(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	fp := r.Fingerprint
	fmt.Fprintf(stdout, "run %s (%s, %s)  %s  started %s, took %s\n", r.ID, r.Kind, r.Status, dash(r.Name),
		r.Start.UTC().Format(time.RFC3339), r.End.Sub(r.Start).Round(time.Millisecond))
	if r.Error != "" {
		fmt.Fprintln(stdout, "error:", r.Error)
	}
	fmt.Fprintf(stdout, "testbed %s; from %s\n", r.ToolVersion, r.SourceDir)
	fmt.Fprintf(
		stdout,
		"fingerprint %s: targets %s; token distributions in %s, out %s; %s\n",
		fp.Hash,
		strings.Join(
			fp.Targets,
			", ",
		),
		strings.Join(fp.InputTokens, ","),
		strings.Join(fp.OutputTokens, ","),
		fp.Options,
	)
	for _, line := range []struct{ k, v string }{{"GPUs", strings.Join(fp.GPUs, ", ")},
		{"server", strings.Join(fp.ServerInfo, ", ")}, {"labels", (&labelList{m: fp.Labels}).String()}} {
		if line.v != "" {
			fmt.Fprintf(stdout, "%s: %s\n", line.k, line.v)
		}
	}
	for _, k := range r.Knees {
		fmt.Fprintf(stdout, "knee %s %s: throughput %s, latency %s, best operating point %s\n", k.Target, k.Ladder,
			ptr(k.ThroughputKnee), ptr(k.LatencyKnee), ptr(k.BestOperatingPoint))
	}
	sum := results.Summary{}
	for _, st := range r.Steps {
		sum.Steps = append(sum.Steps, st.Summary)
	}
	fmt.Fprintln(stdout)
	return harness.WriteTable(stdout, sum)
}

func ptr(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprintf("%g", *v)
}

func historyImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var st storeFlags
	fs := historyFlags("import", stderr, &st)
	fs.Var(&st.labels, "label", "KEY=VALUE about the setup, kept in each imported run's fingerprint (repeatable)")
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("history import needs results directories: %w", errUsage)
	}
	s, err := openStore(ctx, &st)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, root := range fs.Args() {
		dirs, err := resultsDirs(root)
		if err != nil {
			return err
		}
		for _, dir := range dirs {
			r, err := history.FromDir(dir, "import", st.labels.m)
			if err != nil {
				return err
			}
			stored, err := s.Put(ctx, r)
			if err != nil {
				return err
			}
			what := "stored"
			if !stored {
				what = "already stored"
			}
			fmt.Fprintf(stdout, "%s: %s run %s (%s, %d steps)\n", dir, what, r.ID, r.Status, len(r.Steps))
		}
	}
	return nil
}

func historyTrend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var st storeFlags
	fs := historyFlags("trend", stderr, &st)
	var f history.Filter
	var since sinceFlag
	metric := fs.String("metric", "ttft_p99", "metric to follow: ttft_p99, e2e_p50, itl_mean, output_tokens_per_s, …")
	fs.StringVar(&f.Target, "target", "", "only steps against this target")
	fs.StringVar(&f.Scenario, "scenario", "", "only steps of this scenario")
	fs.Var(&since, "since", "only runs started since: 2026-01-31, an RFC 3339 time, or 7d / 36h ago")
	out := fs.String("o", "", "HTML page with the chart (default trend-METRIC.html)")
	st.rules.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("history trend takes no arguments, got %q: %w", fs.Args(), errUsage)
	}
	f.Since = since.t
	rules, err := st.rules.rules()
	if err != nil {
		return err
	}
	s, err := openStore(ctx, &st)
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := s.Trend(ctx, *metric, f, rules)
	if err != nil {
		return err
	}
	if err := t.WriteTable(stdout); err != nil {
		return err
	}
	path := *out
	if path == "" {
		path = "trend-" + t.Metric.Name + ".html"
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := errors.Join(t.WriteHTML(file), file.Close()); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "chart in", path)
	return nil
}
