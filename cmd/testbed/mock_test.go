package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the command's goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listenRE = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)`)

// startMock runs `testbed mock args...` and returns its base URL, the
// cancel that plays SIGINT, and a channel with run's result.
func startMock(t *testing.T, args ...string) (string, context.CancelFunc, <-chan error, *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"mock", "--addr", "127.0.0.1:0"}, args...), &out, &errOut) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listenRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], cancel, done, &errOut
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("mock exited early: %v; stderr: %s", err, errOut.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	t.Fatalf("mock did not report its address; stdout %q", out.String())
	return "", nil, nil, nil
}

func postStream(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestMockGracefulShutdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		grace     string
		maxTokens string
		wantEnd   string // last SSE data line
	}{
		// A stream shorter than the grace period finishes normally.
		{"finishes within grace", "5s", "10", "data: [DONE]"},
		// A stream longer than the grace period ends with a clean error event, then [DONE].
		{"ended after grace", "100ms", "1000", "data: [DONE]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, cancel, done, _ := startMock(t, "--ttft", "5ms", "--itl", "10ms", "--grace", tc.grace)
			defer cancel()
			resp := postStream(
				t,
				url,
				`{"messages":[{"role":"user","content":"hi"}],"max_tokens":`+tc.maxTokens+`,"stream":true}`,
			)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var lines []string
			for sc.Scan() {
				line := sc.Text()
				if line == "" {
					continue
				}
				lines = append(lines, line)
				if len(lines) == 2 { // role chunk and first token: the stream is in flight
					cancel()
				}
			}
			if len(lines) < 3 {
				t.Fatalf("stream too short: %q", lines)
			}
			if got := lines[len(lines)-1]; got != tc.wantEnd {
				t.Errorf("last line %q, want %q", got, tc.wantEnd)
			}
			shutdownErr := strings.Contains(lines[len(lines)-2], "shutting down")
			if finished := tc.maxTokens == "10"; finished == shutdownErr {
				t.Errorf("error event present = %v; lines: %q", shutdownErr, lines[len(lines)-2:])
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run returned %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return after shutdown")
			}
			// The listener is closed: new connections are refused.
			if _, err := http.Get(url + "/health"); err == nil {
				t.Error("server still accepting after shutdown")
			}
		})
	}
}

func TestMockFlagsAndProfileFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(file, []byte("base: ideal\nmax_model_len: 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, cancel, done, _ := startMock(t, "--profile", file, "--model", "m1", "--api-key", "k", "--startup-delay", "0s")
	defer func() { cancel(); <-done }()
	tests := []struct {
		name, auth, body string
		want             int
	}{
		// The API key flag is enforced.
		{"no key", "", `{"model":"m1","prompt":"a","max_tokens":1}`, http.StatusUnauthorized},
		// The model flag names the served model.
		{"wrong model", "Bearer k", `{"model":"other","prompt":"a","max_tokens":1}`, http.StatusNotFound},
		// The profile file's max_model_len (64) applies: 1 prompt + 70 output > 64.
		{"too long", "Bearer k", `{"model":"m1","prompt":"a","max_tokens":70}`, http.StatusBadRequest},
		// Within every limit.
		{"ok", "Bearer k", `{"model":"m1","prompt":"a","max_tokens":2}`, http.StatusOK},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(tc.body))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

func TestMockBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--profile", "no-such-preset"}, "unknown preset"},            // unknown preset name
		{[]string{"--itl", "-1ms"}, "itl"},                                     // validation names the field
		{[]string{"--fault-stall", "2"}, "stall_rate"},                         // rates are probabilities
		{[]string{"--addr", "127.0.0.1:notaport"}, "--addr"},                   // listen errors name the flag
		{[]string{"--profile", "/nonexistent/profile.yaml"}, "--profile"},      // missing file
		{[]string{"--answer-min", "10", "--answer-max", "5"}, "answer length"}, // inverted range
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"mock"}, tc.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mock %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"mock", "extra"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("positional argument: %v, want usage error", err)
	}
}
