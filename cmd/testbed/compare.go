package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/llm-testbed/testbed/harness/history"
	"github.com/llm-testbed/testbed/harness/results"
)

func init() {
	register(
		command{
			name:    "compare",
			summary: "compare two runs step by step; exit 1 on a regression (for CI gates)",
			run:     runCompare,
		},
	)
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var st storeFlags
	st.registerLocation(fs)
	st.rules.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(
			stderr,
			"usage: testbed compare BASE NEW [flags]\n\nBASE and NEW are results directories or stored run ids. Exit status: "+
				"0 no regression, 1 regression.",
		)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return fmt.Errorf("compare needs BASE and NEW: %w", errUsage)
	}
	rules, err := st.rules.rules()
	if err != nil {
		return err
	}
	var store *history.Store
	defer func() {
		if store != nil {
			_ = store.Close()
		}
	}()
	var runs [2]*history.Run
	for i, a := range fs.Args() {
		if runs[i], err = loadRun(ctx, a, &st, &store); err != nil {
			return err
		}
	}
	return judge(runs[0], runs[1], rules, stdout)
}

// loadRun reads a results directory, or else a run from the store
// (opened on first need).
func loadRun(ctx context.Context, arg string, st *storeFlags, store **history.Store) (*history.Run, error) {
	if _, err := os.Stat(filepath.Join(arg, results.RunFile)); err == nil {
		return history.FromDir(arg, "import", nil)
	}
	if *store == nil {
		s, _, err := st.open(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s is not a results directory, and the store cannot be read: %w", arg, err)
		}
		*store = s
	}
	r, err := (*store).Get(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("%s: neither a results directory nor a stored run: %w", arg, err)
	}
	return r, nil
}
