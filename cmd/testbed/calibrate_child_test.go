package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/calibration/ceiling"
)

// asCLI makes the test binary behave as testbed itself, so a command that
// starts testbed as a child (calibrate's mock) can be tested: the child is
// this binary with the variable set.
const asCLI = "TESTBED_TEST_AS_CLI"

// TestMain (store_test.go) checks asCLI first.

var childPID = regexp.MustCompile(`child process (\d+) at`)

// calibrate starts its mock as a child process by default: the table says
// so, the levels are measured from kernel stamps where the system has them,
// and the child is gone when calibrate returns. Not parallel: it sets the
// environment the child inherits.
func TestCalibrateChildMock(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := filepath.Join(t.TempDir(), "cal")
	var stdout, stderr bytes.Buffer
	// Limits out of reach: a busy test machine decides nothing here.
	args := []string{"calibrate", "--concurrency", "1,4", "--no-rate", "--duration", "300ms", "--ttft", "5ms",
		"--itl", "2ms", "--output-tokens", "6", "--max-error", "1h", "--max-lag", "1h", "--cpu-limit", "1", "-o", dir}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"child process", "client error", "server late", "c=4"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m := childPID.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no child pid in:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("child mock %d still there after calibrate returned (kill 0: %v)", pid, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "calibration.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep ceiling.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, lv := range rep.Levels {
		if lv.Requests == 0 || lv.Unmatched != 0 {
			t.Errorf("c=%d: %d compared, %d unmatched", lv.Concurrency, lv.Requests, lv.Unmatched)
		}
		if runtime.GOOS == "linux" && lv.Clock != "kernel" {
			t.Errorf("c=%d measured from %q stamps, want kernel on Linux", lv.Concurrency, lv.Clock)
		}
		// The mock's lateness is its own column; a 2 ms ITL mock is not seconds late.
		if lv.ServerLatenessMS.P50 < 0 || lv.ServerLatenessMS.P50 > float64(time.Second/time.Millisecond) {
			t.Errorf("c=%d: server lateness %+v", lv.Concurrency, lv.ServerLatenessMS)
		}
	}
	// --in-process and --url together name two mocks.
	if err := run(context.Background(), []string{"calibrate", "--in-process", "--url", "http://127.0.0.1:1"},
		&stdout, &stderr); err == nil {
		t.Error("calibrate accepted --in-process with --url")
	}
}
