package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/pgtest"
)

// cliHelperEnv makes the test binary run the CLI with the arguments in
// cliArgsEnv instead of the tests: a real testbed process to kill.
const (
	cliHelperEnv = "TESTBED_TEST_CLI"
	cliArgsEnv   = "TESTBED_TEST_CLI_ARGS"
)

// TestMain keeps every test's runs out of the user's real results store:
// commands that record a run write into a temporary store unless a test
// names its own.
func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		main()
		os.Exit(0)
	}
	if os.Getenv(cliHelperEnv) != "" {
		err := run(context.Background(), strings.Split(os.Getenv(cliArgsEnv), "\x1f"), os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "testbed-cmd-store-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(storeEnv, filepath.Join(dir, "history.db"))
	code := m.Run()
	if err := errors.Join(pgtest.StopShared(), os.RemoveAll(dir)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// storeBackends are the stores the CLI tests run against.
var storeBackends = []struct {
	name string
	loc  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "history.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.Database(t) }},
}

// cli runs the CLI and returns its stdout; an error fails the test.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cliErr(args...)
	if err != nil {
		t.Fatalf("testbed %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func cliErr(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String() + stderr.String(), err
}

// TestHistoryCLI: runs recorded by bench are listed, shown, imported
// again as a no-op, and trended into a chart, on each backend.
func TestHistoryCLI(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 3*time.Millisecond, time.Millisecond)
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.loc(t)
			dir := t.TempDir()
			var dirs []string
			for i := range 3 {
				d := filepath.Join(dir, fmt.Sprint("run", i))
				dirs = append(dirs, d)
				out := cli(t, "bench", "--url", srv.URL, "--model", "m", "--concurrency", "2", "--requests", "12",
					"--output-tokens", "fixed:4", "--store", store, "--label", "image=mock:test", "-o", d)
				if !strings.Contains(out, "stored run ") {
					t.Fatalf("bench did not record its run:\n%s", out)
				}
			}
			ls := cli(t, "history", "ls", "--store", store, "--target", "target", "--since", "1h")
			if !strings.Contains(ls, "3 runs in") || !strings.Contains(ls, "bench") {
				t.Errorf("history ls:\n%s", ls)
			}
			if out := cli(t, "history", "ls", "--store", store, "--scenario", "rate"); !strings.Contains(out, "0 runs") {
				t.Errorf("history ls --scenario rate:\n%s", out)
			}
			var info results.RunInfo[struct{}]
			must(t, results.ReadJSON(filepath.Join(dirs[0], results.RunFile), &info))
			show := cli(t, "history", "show", info.RunID, "--store", store)
			for _, want := range []string{"run " + info.RunID + " (bench, complete)", "labels: image=mock:test", "TTFT p50"} {
				if !strings.Contains(show, want) {
					t.Errorf("history show lacks %q:\n%s", want, show)
				}
			}
			if out := cli(t, "history", "import", dir, "--store", store); strings.Count(out, "already stored") != 3 {
				t.Errorf("importing stored runs again:\n%s", out)
			}
			page := filepath.Join(dir, "trend.html")
			trend := cli(t, "history", "trend", "--metric", "e2e_p50", "--target", "target", "--store", store, "-o", page)
			if strings.Count(trend, "target concurrency c=2") != 3 {
				t.Errorf("history trend:\n%s", trend)
			}
			html, err := os.ReadFile(page)
			must(t, err)
			if !bytes.Contains(html, []byte("<svg")) || !bytes.Contains(html, []byte("e2e_p50 over runs")) {
				t.Errorf("trend page has no chart:\n%.500s", html)
			}
		})
	}
}

// TestCompareCLI is the CI gate on the mock: two runs of one plan compare
// unchanged (exit 0); against a mock 10 % slower, `--baseline last`
// fails naming metric and step (exit 1). It times real streams, so it
// runs alone and, under the race detector, only logs the verdicts.
func TestCompareCLI(t *testing.T) {
	store := filepath.Join(t.TempDir(), "history.db")
	dir := t.TempDir()
	bench := func(srvURL, name string, extra ...string) (string, error) {
		args := append([]string{"bench", "--url", srvURL, "--model", "m", "--concurrency", "4", "--requests", "40",
			"--warmup", "4", "--output-tokens", "fixed:8", "--store", store, "-o", filepath.Join(dir, name)}, extra...)
		return cliErr(args...)
	}
	check := t.Errorf
	if raceEnabled {
		check = t.Logf
	}
	fast := fixedMockServer(t, 100*time.Millisecond, 10*time.Millisecond)
	for _, name := range []string{"a", "b"} {
		if out, err := bench(fast.URL, name); err != nil {
			t.Fatalf("bench: %v\n%s", err, out)
		}
	}
	out, err := cliErr("compare", filepath.Join(dir, "a"), filepath.Join(dir, "b"))
	if err != nil || !strings.Contains(out, "no regression") {
		check("compare of two runs of one plan = %v, want no regression:\n%s", err, out)
	}
	slow := fixedMockServer(t, 110*time.Millisecond, 11*time.Millisecond)
	out, err = bench(slow.URL, "slow", "--baseline", "last")
	if err == nil || !strings.Contains(err.Error(), "regression against") ||
		!strings.Contains(err.Error(), "at target concurrency c=4") {
		check("bench --baseline last against a mock 10 %% slower = %v, want a regression naming metric and step:\n%s", err, out)
	}
	t.Logf("%s\n%v", out, err)
}

// TestRunKilled: a `testbed run` killed with SIGKILL leaves the store
// readable and without the run; importing its directory stores it marked
// incomplete.
func TestRunKilled(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 5*time.Millisecond, 5*time.Millisecond)
	dir := t.TempDir()
	store := filepath.Join(dir, "history.db")
	plan := filepath.Join(dir, "plan.yaml")
	must(t, os.WriteFile(plan, []byte(fmt.Sprintf(`
targets: [{name: mock, url: %q, model: m}]
dataset: {output_tokens: "fixed:20"}
load: {concurrency: [1, 2], duration: 30s}
`, srv.URL)), 0o644))
	cli(t, "history", "ls", "--store", store) // the store exists before
	out := filepath.Join(dir, "res")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliHelperEnv+"=1", cliArgsEnv+"="+strings.Join([]string{"run", plan, "-o", out, "--store", store}, "\x1f"))
	must(t, cmd.Start())
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(filepath.Join(out, results.RecordsFile)); bytes.Count(b, []byte("\n")) >= 5 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	if ls := cli(t, "history", "ls", "--store", store); !strings.Contains(ls, "0 runs") {
		t.Errorf("the killed run is in the store:\n%s", ls)
	}
	imp := cli(t, "history", "import", out, "--store", store)
	if !strings.Contains(imp, "(incomplete,") {
		t.Errorf("import of the killed run's directory:\n%s", imp)
	}
	if ls := cli(t, "history", "ls", "--store", store, "--status", "incomplete"); !strings.Contains(ls, "1 runs") {
		t.Errorf("history ls --status incomplete:\n%s", ls)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
