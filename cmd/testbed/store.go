package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness/history"
	"github.com/llm-testbed/testbed/harness/results"
)

// storeEnv names the results store when --store is not given.
const storeEnv = "TESTBED_STORE"

// storeFlags are the results-store flags of the commands that run load.
type storeFlags struct {
	loc      string
	off      bool
	labels   labelList
	baseline string
	rules    rulesFlags
}

func (f *storeFlags) register(fs *flag.FlagSet, baseline bool) {
	f.registerLocation(fs)
	fs.BoolVar(&f.off, "no-store", false, "do not record this run in the results store")
	fs.Var(
		&f.labels,
		"label",
		"KEY=VALUE about the setup (image, driver, server version or args), kept in the run's fingerprint (repeatable)",
	)
	if baseline {
		fs.StringVar(
			&f.baseline,
			"baseline",
			"",
			"after the run, compare it with this stored run (`last` = the newest run of the same plan); exit 1 on a regression",
		)
		f.rules.register(fs)
	}
}

func (f *storeFlags) registerLocation(fs *flag.FlagSet) {
	fs.StringVar(
		&f.loc,
		"store",
		"",
		"results store: an SQLite file or a postgres:// URL (default $"+storeEnv+", else history.db in the user's data "+
			"directory)",
	)
}

// location is the store to use and whether the user chose it (then a
// failure to use it is an error, not a warning).
func (f *storeFlags) location() (loc string, chosen bool, err error) {
	if f.loc != "" {
		return f.loc, true, nil
	}
	if v := os.Getenv(storeEnv); v != "" {
		return v, true, nil
	}
	loc, err = history.DefaultLocation()
	return loc, false, err
}

// open opens the store the flags name.
func (f *storeFlags) open(ctx context.Context) (*history.Store, bool, error) {
	loc, chosen, err := f.location()
	if err != nil {
		return nil, chosen, err
	}
	s, err := history.Open(ctx, loc)
	return s, chosen, err
}

// record stores the runs in dirs (one per results directory) after a
// command ran them, then judges the first against --baseline. runErr is
// the command's own error: a run that ended with one is stored as failed.
// The store is written even after Ctrl-C, with a bound on the wait.
func (f *storeFlags) record(
	ctx context.Context,
	kind string,
	dirs []string,
	runErr error,
	stdout, stderr io.Writer,
) error {
	if (f.off && f.baseline == "") || len(dirs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	s, chosen, err := f.open(ctx)
	if err != nil {
		return f.storeFailed(chosen, err, stderr)
	}
	defer s.Close()
	var runs []*history.Run
	for _, dir := range dirs {
		r, err := history.FromDir(dir, kind, f.labels.m)
		if err != nil {
			return f.storeFailed(chosen, err, stderr)
		}
		if runErr != nil && r.Status == history.StatusComplete {
			r.Status, r.Error = history.StatusFailed, runErr.Error()
		}
		runs = append(runs, r)
		if f.off {
			continue
		}
		if _, err := s.Put(ctx, r); err != nil {
			return f.storeFailed(chosen, err, stderr)
		}
		fmt.Fprintf(stdout, "stored run %s (%s) in %s\n", r.ID, r.Status, s)
	}
	if f.baseline == "" || runErr != nil {
		return nil
	}
	return f.compareBaseline(ctx, s, runs[0], stdout)
}

func (f *storeFlags) storeFailed(chosen bool, err error, stderr io.Writer) error {
	if chosen {
		return fmt.Errorf("results store: %w", err)
	}
	fmt.Fprintf(stderr, "warning: run not recorded in the results store: %v\n", err)
	return nil
}

// compareBaseline judges r against --baseline and fails on a regression.
func (f *storeFlags) compareBaseline(ctx context.Context, s *history.Store, r *history.Run, stdout io.Writer) error {
	var base *history.Run
	var err error
	if f.baseline == "last" {
		base, err = s.Last(ctx, r.Fingerprint.Hash, r.ID)
	} else {
		base, err = s.Get(ctx, f.baseline)
	}
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	rules, err := f.rules.rules()
	if err != nil {
		return err
	}
	return judge(base, r, rules, stdout)
}

// judge compares and prints; a regression is an error (exit status 1).
func judge(base, cur *history.Run, rules history.Rules, stdout io.Writer) error {
	c, err := history.Compare(base, cur, rules)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := c.WriteTable(stdout); err != nil {
		return err
	}
	if regs := c.Regressions(); len(regs) > 0 {
		return fmt.Errorf("regression against %s: %s", base.ID, strings.Join(regs, "; "))
	}
	return nil
}

// resultsDirs lists the results directories at or under root: a run's
// directory, or a folder of them (calibrate's, or results/).
func resultsDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == results.RunFile {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s: no results directory (no %s) here or below", root, results.RunFile)
	}
	return dirs, nil
}
