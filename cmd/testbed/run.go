package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(command{name: "run", summary: "run a load plan (YAML) and write its results directory", run: runRun})
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "results directory (default results/run-<time>); {shard} in it becomes the shard's index")
	var st storeFlags
	st.register(fs, true)
	var lf liveFlags
	lf.register(fs)
	var sh shardFlag
	fs.Var(&sh, "shard", "run shard I of N of the plan (I from 0), or auto/N to take the index the coordinator assigns")
	coord := fs.String("coordinator", "", "URL of `testbed coordinate`, so the shards start every step together")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed run PLAN.yaml [-o DIR] [--shard I/N [--coordinator URL]]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("run needs exactly one plan file: %w", errUsage)
	}
	plan, err := harness.LoadPlan(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := sh.apply(&plan, *coord); err != nil {
		return err
	}
	if plan.Shard != nil {
		// A shard is part of a run: testbed merge records and judges the whole.
		if st.baseline != "" {
			return fmt.Errorf("--baseline judges whole runs: give it to testbed merge, not to a shard: %w", errUsage)
		}
		st.off = true
	}
	return runPlan(ctx, plan, resultsDir(*out, "run"), stdout, stderr, runSetup{kind: "run", store: &st, live: &lf})
}

// reorderFlags moves flags after positional arguments to the front, so
// `testbed run plan.yaml -o DIR` works as well as `-o DIR plan.yaml`.
func reorderFlags(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func isBoolFlag(a string) bool {
	a = strings.TrimLeft(a, "-")
	return a == "h" || a == "help"
}

// resultsDir is dir, or results/<kind>-<UTC time> when dir is empty.
func resultsDir(dir, kind string) string {
	if dir != "" {
		return dir
	}
	return filepath.Join("results", kind+"-"+time.Now().UTC().Format("20060102-150405"))
}

// runSetup is what the commands that run a plan add around the run: the
// results store and the live metrics endpoint.
type runSetup struct {
	kind  string // run, bench, demo: the stored run's kind
	store *storeFlags
	live  *liveFlags // nil: no --metrics-addr
}

// runPlan runs plan with a progress line on stderr and prints the table,
// then records the run in the results store.
func runPlan(
	ctx context.Context,
	plan harness.Plan,
	dir string,
	stdout, stderr io.Writer,
	rs runSetup,
	opts ...harness.RunOption,
) error {
	prog := newProgress(stderr)
	// The progress line and the run's warnings come from their own goroutines.
	stderr = &lockedWriter{w: stderr}
	prog.w = stderr
	opts = append([]harness.RunOption{
		harness.WithVersion(version),
		harness.WithProgress(prog.interval, prog.show),
		harness.WithWarnings(stderr),
		harness.WithStop(stopOf(ctx)),
	}, opts...)
	stopLive, err := rs.live.start(&opts, prog, stderr)
	if err != nil {
		return err
	}
	res, err := harness.Run(ctx, plan, dir, opts...)
	prog.clear()
	err = errors.Join(err, stopLive())
	if res == nil {
		return err
	}
	fmt.Fprintln(stdout)
	if terr := harness.WriteTable(stdout, res.Summary); terr != nil {
		err = errors.Join(err, terr)
	}
	fmt.Fprintf(stdout, "\n%d requests recorded in %s\n", res.Info.Records, res.Dir)
	printShard(stdout, res.Info.Shard)
	if res.Interrupted {
		fmt.Fprintln(stdout, "run interrupted: unfinished requests were recorded as cancelled")
	}
	// A failed push is the command's error, not the run's: the stored run
	// keeps its own status.
	pushErr := rs.live.push(ctx, res, stdout)
	if rs.store != nil {
		err = errors.Join(err, rs.store.record(ctx, rs.kind, []string{dir}, err, stdout, stderr))
	}
	err = errors.Join(err, pushErr)
	if err != nil {
		return err
	}
	return runStatus(res)
}

// runStatus is the error, and exit status, of a run that completed its
// files: interrupted, or without one successful request. A caller that
// only needs the files can ignore it.
func runStatus(res *harness.Outcome) error {
	if res.Interrupted {
		return &statusError{exitInterrupted, fmt.Errorf("run interrupted; results in %s", res.Dir)}
	}
	requests := 0
	ok := 0
	failed := map[string]int{}
	for _, s := range res.Summary.Steps {
		requests += s.Requests
		ok += s.OK
		for c, n := range s.Errors {
			failed[string(c)] += n
		}
	}
	if requests > 0 && ok == 0 {
		return &statusError{exitNoSuccess, fmt.Errorf("not one of %d requests succeeded (%s); results in %s",
			requests, classCounts(failed), res.Dir)}
	}
	return nil
}

// classCounts writes error counts as "class n, class n" in class order.
func classCounts(m map[string]int) string {
	var parts []string
	for _, c := range results.ErrorClasses {
		if n := m[string(c)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// printShard says which shard this was and how well it kept in step.
func printShard(w io.Writer, sh *results.ShardInfo) {
	if sh == nil {
		return
	}
	var late time.Duration
	unsynced := 0
	for _, s := range sh.Steps {
		late = max(late, time.Duration(s.LateNS))
		if s.Unsynced != "" {
			unsynced++
		}
	}
	fmt.Fprintf(w, "shard %d/%d: clock offset %.3f ms (±%.3f ms), steps started at most %.3f ms after the agreed time",
		sh.Index, sh.Count, float64(sh.ClockOffsetNS)/1e6, float64(sh.ClockRTTNS)/2e6, float64(late)/1e6)
	if sh.Coordinator == "" {
		fmt.Fprint(w, " (no coordinator: steps started unsynchronised)")
	}
	if unsynced > 0 {
		fmt.Fprintf(w, "; %d steps started unsynchronised", unsynced)
	}
	fmt.Fprintln(w)
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// progress draws a one-line progress report on stderr: redrawn in place
// on a terminal, one line every few seconds otherwise (logs, CI).
type progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, interval: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 250*time.Millisecond
		}
	}
	return p
}

func (p *progress) show(s harness.Progress) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", progressBar(s, p.width()))
		p.drawn = true
		return
	}
	total := "?"
	if s.StepTotal > 0 {
		total = strconv.FormatInt(s.StepTotal, 10)
	}
	fmt.Fprintf(p.w, "[step %d/%d] %s  sent %d/%s  done %d  errors %d  in flight %d  %.1fs\n",
		s.Step+1, s.Steps, s.Label, s.Sent, total, s.Done, s.Errors, s.InFlight, s.Elapsed.Seconds())
}

// width is the terminal's width from $COLUMNS, else 100.
func (p *progress) width() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		return n
	}
	return 100
}

// progressBar draws one line for a terminal: the step, a bar of its
// progress, elapsed and remaining time, and the counters, cut to width.
func progressBar(s harness.Progress, width int) string {
	const barLen = 20
	bar := strings.Repeat("·", barLen)
	pct := "  ?%"
	if f := s.Fraction(); f >= 0 {
		n := int(f * barLen)
		bar = strings.Repeat("█", n) + strings.Repeat("·", barLen-n)
		pct = fmt.Sprintf("%3.0f%%", f*100)
	}
	left := "?"
	if r := s.Remaining(); r >= 0 {
		left = shortDuration(r)
	}
	line := fmt.Sprintf("[%d/%d] %s %s %s  %s elapsed, %s left  done %d  errors %d  in flight %d",
		s.Step+1, s.Steps, s.Label, bar, pct, shortDuration(s.Elapsed), left, s.Done, s.Errors, s.InFlight)
	if r := []rune(line); len(r) > width-1 {
		line = string(r[:width-1])
	}
	return line
}

// shortDuration writes d as 4s, 1m05s or 1h02m.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

func (p *progress) clear() {
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
