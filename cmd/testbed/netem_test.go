package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/gpu"
	"github.com/llm-testbed/testbed/harness/results"
)

var netemRE = regexp.MustCompile(`netem: (127\.0\.0\.1:\d+) -> `)

// TestNetemCommand puts `testbed netem` with 30 ms each way in front of
// `testbed mock`: a health check through it takes at least the round trip.
func TestNetemCommand(t *testing.T) {
	t.Parallel()
	const lat = 30 * time.Millisecond
	base, stopMock, mockDone, _ := startMock(t)
	defer func() { stopMock(); <-mockDone }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"netem", "--listen", "127.0.0.1:0", "--upstream", strings.TrimPrefix(base, "http://"),
			"--latency", lat.String(), "--bandwidth", "100mbit", "--seed", "3"}, &out, &errOut)
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := netemRE.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("netem did not report its address; stdout %q stderr %q", out.String(), errOut.String())
	}
	start := time.Now()
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 200 || took < 2*lat {
		t.Errorf("health through netem: %d in %v, want 200 after at least %v", resp.StatusCode, took, 2*lat)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"accepted":1`) ||
		!strings.Contains(out.String(), `"bandwidth_bytes_per_s":12500000`) {
		t.Errorf("stdout %q lacks the config or the final stats", out.String())
	}
}

func TestNetemAndSampleUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"netem"}, "--upstream is required"}, // nowhere to forward
		{
			[]string{"netem", "--upstream", "127.0.0.1:1", "--bandwidth", "fast"},
			"",
		}, // bad rate: flag error
		{[]string{"netem", "--upstream", "127.0.0.1:1", "--reset-dir", "sideways"}, "reset-dir"}, // unknown direction
		{[]string{"sample"}, "nothing to sample"},                                                // no source
		{
			[]string{"sample", "--prometheus", "localhost:9400"},
			"",
		}, // no scheme: source error
	}
	for _, c := range cases {
		var out, errOut lockedBuffer
		err := run(context.Background(), c.args, &out, &errOut)
		if err == nil {
			t.Errorf("%v: no error", c.args)
			continue
		}
		if c.want != "" && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %q, want it to mention %q", c.args, err, c.want)
		}
	}
	// Invalid shaping reaches the user as netem's own message.
	err := run(
		context.Background(),
		[]string{"netem", "--upstream", "127.0.0.1:1", "--stall-every", "1s"},
		io.Discard,
		io.Discard,
	)
	if err == nil || !strings.Contains(err.Error(), "stall_for") || errors.Is(err, errUsage) {
		t.Errorf("stall without --stall-for: %v", err)
	}
}

// TestSampleCommand scrapes `testbed mock`'s /metrics for a short while.
func TestSampleCommand(t *testing.T) {
	t.Parallel()
	base, stopMock, mockDone, _ := startMock(t)
	defer func() { stopMock(); <-mockDone }()
	path := filepath.Join(t.TempDir(), results.ServerMetricsFile)
	var out, errOut lockedBuffer
	err := run(context.Background(), []string{"sample", "--prometheus", base + "/metrics", "--interval", "20ms",
		"--duration", "1s", "-o", path}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v; stderr %s", err, errOut.String())
	}
	got, err := results.ReadSamples(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 3 {
		t.Fatalf("%d samples in 1 s at 20 ms", len(got))
	}
	for _, s := range got {
		if s.Error != "" || s.Source != base+"/metrics" {
			t.Fatalf("sample %+v", s)
		}
		if _, ok := s.Metrics[`vllm:num_requests_running{model_name="testbed-mock"}`]; !ok {
			t.Fatalf("sample without vLLM's running gauge: %v", s.Metrics)
		}
	}
	if !strings.Contains(out.String(), `"dropped":0`) {
		t.Errorf("stdout %q lacks the stats", out.String())
	}
}

// TestSampleNVMLUnavailable: without an NVIDIA driver (or without cgo),
// --nvml fails with a clear message instead of aborting.
func TestSampleNVMLUnavailable(t *testing.T) {
	t.Parallel()
	n, err := gpu.OpenNVML()
	if err == nil {
		n.Close()
		t.Skip("this host has NVML")
	}
	err = run(
		context.Background(),
		[]string{"sample", "--nvml", "--duration", "10ms", "-o", filepath.Join(t.TempDir(), "g.jsonl")},
		io.Discard,
		io.Discard,
	)
	if err == nil || !strings.Contains(err.Error(), "NVML not available") {
		t.Errorf("sample --nvml: %v", err)
	}
}

// TestGPUAgentNeedsNVML: without NVML the agent refuses to start, saying why.
func TestGPUAgentNeedsNVML(t *testing.T) {
	t.Parallel()
	if n, err := gpu.OpenNVML(); err == nil {
		n.Close()
		t.Skip("this host has NVML")
	}
	err := run(context.Background(), []string{"gpu-agent", "--addr", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "NVML not available") {
		t.Errorf("gpu-agent: %v", err)
	}
}
