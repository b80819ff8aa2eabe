package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMockAsServer checks `testbed mock` as a server people leave running:
// idle and slow connections are closed, the key can come from the
// environment, and HTTP/2 without TLS (h2c) works for `bench --http 2`.
func TestMockAsServer(t *testing.T) {
	t.Parallel()
	const keyVar = "TESTBED_MOCKSERVER_TEST_KEY"
	os.Setenv(keyVar, "s3cret")
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, url string)
	}{
		// An idle keep-alive connection is closed after --http-idle-timeout.
		{"idle timeout", []string{"--http-idle-timeout", "200ms"}, func(t *testing.T, url string) {
			c := dialRaw(t, url)
			io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("health: %v", err)
			}
			closedWithin(t, c, br, 3*time.Second)
		}},
		// A body sent a byte at a time is cut off by --http-read-timeout.
		{"read timeout", []string{"--http-read-timeout", "300ms"}, func(t *testing.T, url string) {
			c := dialRaw(t, url)
			io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
			closedWithin(t, c, bufio.NewReader(c), 3*time.Second)
		}},
		// The key from the environment is required; /metrics stays open.
		{"key from environment", []string{"--api-key-env", keyVar}, func(t *testing.T, url string) {
			for path, want := range map[string]int{"/v1/models": 401, "/metrics": 200} {
				resp, err := http.Get(url + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
				}
			}
			req, _ := http.NewRequest(http.MethodGet, url+"/v1/models", nil)
			req.Header.Set("Authorization", "Bearer s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("with the key: %d", resp.StatusCode)
			}
		}},
		// bench --http 2 speaks h2c to the mock.
		{"h2c", []string{"--ttft", "1ms", "--itl", "1ms"}, func(t *testing.T, url string) {
			var stdout, stderr bytes.Buffer
			dir := filepath.Join(t.TempDir(), "out")
			err := run(context.Background(), []string{"bench", "--url", url, "--model", "testbed-mock", "--http", "2",
				"--requests", "3", "--input-tokens", "8", "--output-tokens", "4", "-o", dir}, &stdout, &stderr)
			if err != nil {
				t.Fatalf("bench --http 2: %v\n%s", err, stderr.String())
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, cancel, done, _ := startMock(t, tc.args...)
			defer func() { cancel(); <-done }()
			tc.check(t, url)
		})
	}
}

func dialRaw(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin fails unless the server closes c within d.
func closedWithin(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", d)
	}
}
