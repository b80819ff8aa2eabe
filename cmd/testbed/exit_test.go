package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// TestExitStatus checks the exit status of bench for each way a run can end.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	good := fixedMockServer(t, time.Millisecond, time.Millisecond)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"down"}}`, http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	// slow holds every generation request until the client goes away, and
	// tells on inFlight that one is in flight. One per row that uses it.
	slow := func(inFlight chan<- struct{}) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				return
			}
			select {
			case inFlight <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	tests := []struct {
		name      string
		url       string
		interrupt bool // cancel the run after its first request is out
		stop      bool // and close the stop channel, as a second Ctrl-C does
		code      int
		says      string
	}{
		// Every request succeeded.
		{name: "ok", url: good.URL, code: 0},
		// Every request failed: the run completed, but measured nothing.
		{name: "all failed", url: broken.URL, code: exitNoSuccess, says: "server_error 4"},
		// Ctrl-C once: in-flight requests are cancelled after the grace period.
		{name: "interrupted", interrupt: true, code: exitInterrupted, says: "interrupted"},
		// Ctrl-C twice: no grace period, the records are still written.
		{name: "stopped", interrupt: true, stop: true, code: exitInterrupted, says: "interrupted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stop := make(chan struct{})
			ctx = withStop(ctx, stop)
			url := tc.url
			inFlight := make(chan struct{}, 1)
			if tc.interrupt {
				url = slow(inFlight)
				go func() {
					<-inFlight
					cancel()
					if tc.stop {
						close(stop)
					}
				}()
			}
			dir := filepath.Join(t.TempDir(), "out")
			args := []string{"bench", "--url", url, "--model", "m", "--concurrency", "2", "--requests", "4",
				"--input-tokens", "fixed:8", "--output-tokens", "fixed:4"}
			if tc.stop {
				args = append(args, "--grace", "30s")
			}
			var stdout, stderr bytes.Buffer
			start := time.Now()
			err := run(ctx, append(args, "-o", dir), &stdout, &stderr)
			if got := exitCode(err); got != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", got, err, tc.code, stderr.String())
			}
			if tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("error %v does not say %q", err, tc.says)
			}
			if tc.stop && time.Since(start) > 10*time.Second {
				t.Errorf("a second interrupt took %v to stop the run", time.Since(start))
			}
			recs, rerr := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
			if rerr != nil || len(recs) == 0 {
				t.Fatalf("records: %d, %v", len(recs), rerr)
			}
			if _, serr := os.Stat(filepath.Join(dir, results.SummaryFile)); errors.Is(serr, os.ErrNotExist) {
				t.Error("no summary.json")
			}
		})
	}
}

// TestInterruptEscalation: the first signal cancels the run's context, the
// second closes the stop channel, the third exits with status 130.
func TestInterruptEscalation(t *testing.T) {
	t.Parallel()
	sig := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	var stderr lockedBuffer
	stop := onInterrupts(sig, cancel, &stderr, func(code int) { exited <- code })
	sig <- os.Interrupt
	<-ctx.Done()
	select {
	case <-stop:
		t.Fatal("one interrupt closed the stop channel")
	default:
	}
	sig <- os.Interrupt
	<-stop
	sig <- os.Interrupt
	if code := <-exited; code != exitInterrupted {
		t.Errorf("third interrupt exits %d, want %d", code, exitInterrupted)
	}
	if !strings.Contains(stderr.String(), "Ctrl-C again") {
		t.Errorf("no hint about a second Ctrl-C: %q", stderr.String())
	}
}
