package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBenchMetricsAddr: with --metrics-addr, /metrics answers while the
// run runs and counts its requests; without it nothing listens.
func TestBenchMetricsAddr(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 40*time.Millisecond, 5*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	must(t, ln.Close())

	var mu sync.Mutex
	var last string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			last = string(b)
			mu.Unlock()
		}
	}()
	out := cli(t, "bench", "--url", srv.URL, "--model", "m", "--concurrency", "2", "--requests", "16",
		"--output-tokens", "fixed:4", "--no-store", "--metrics-addr", addr, "-o", t.TempDir())
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{`testbed_requests_total{class="ok",target="target"}`, "testbed_ttft_seconds_bucket",
		"testbed_requests_in_flight", "process_cpu_seconds_total"} {
		if !strings.Contains(last, want) {
			t.Errorf("/metrics during the run lacks %s:\n%.2000s", want, last)
		}
	}
	if !strings.Contains(out, "live metrics at http://"+addr+"/metrics") {
		t.Errorf("bench does not say where its metrics are:\n%s", out)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after the run")
	}
}

// TestBenchOTLPEndpoint: --otlp-endpoint pushes the steps to an OTLP/HTTP
// receiver after the run.
func TestBenchOTLPEndpoint(t *testing.T) {
	t.Parallel()
	srv := fixedMockServer(t, 2*time.Millisecond, time.Millisecond)
	var mu sync.Mutex
	var posts int
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost && r.URL.Path == "/v1/metrics" && len(b) > 0 &&
			r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts++
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	out := cli(t, "bench", "--url", srv.URL, "--model", "m", "--concurrency", "1,2", "--requests", "4",
		"--output-tokens", "fixed:2", "--no-store", "--otlp-endpoint", rcv.URL+"/v1/metrics", "-o", t.TempDir())
	mu.Lock()
	defer mu.Unlock()
	if posts == 0 || !strings.Contains(out, "pushed 2 steps to "+rcv.URL) {
		t.Errorf("%d OTLP exports received; output:\n%s", posts, out)
	}
}
