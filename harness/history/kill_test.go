package history

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const killHelperEnv = "TESTBED_HISTORY_KILL_HELPER"

// killSteps is the size of each run the helper stores: enough rows that a
// kill often lands inside a transaction.
const killSteps = 16

// killHelper runs in a child process: it stores copies of one run under
// new ids, as fast as it can, until it is killed.
func killHelper() {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(killHelperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := FromDir(os.Getenv("TESTBED_HISTORY_KILL_DIR"), "run", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Many steps make each transaction long, so the kill lands inside one.
	base := r.Steps
	for len(r.Steps) < killSteps {
		st := base[len(r.Steps)%len(base)]
		st.Summary.Step = len(r.Steps)
		r.Steps = append(r.Steps, st)
	}
	for i := 0; ; i++ {
		r.ID = fmt.Sprintf("killed-%06d", i)
		if _, err := s.Put(ctx, r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("stored")
	}
}

// TestSurvivesSIGKILL kills a process in the middle of storing runs: the
// store still opens, and every run in it has all its steps.
func TestSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dir := mockRun(t, time.Millisecond, time.Millisecond, 2)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			loc := b.loc(t)
			openStore(t, loc) // migrate before the child starts
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), killHelperEnv+"="+loc, "TESTBED_HISTORY_KILL_DIR="+dir)
			out, err := cmd.StdoutPipe()
			must(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			must(t, cmd.Start())
			// Two runs stored, the third in flight: kill it.
			lines := bufio.NewScanner(out)
			for range 2 {
				if !lines.Scan() {
					t.Fatalf("helper ended: %v: %s", lines.Err(), stderr.String())
				}
			}
			time.Sleep(20 * time.Millisecond)
			must(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			s := openStore(t, loc)
			es, err := s.List(context.Background(), Filter{})
			must(t, err)
			if len(es) == 0 {
				t.Fatalf("no run stored before the kill; helper said: %s", stderr.String())
			}
			want := es[0].Steps
			for _, e := range es {
				if e.Steps != want || want != killSteps {
					t.Fatalf("run %s has %d steps after the kill, want %d (%d)", e.ID, e.Steps, want, killSteps)
				}
			}
			t.Logf("%d whole runs stored before SIGKILL (%s)", len(es), filepath.Base(loc))
		})
	}
}
