package live

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// prometheusBinary finds a Prometheus server, or skips the test; in CI
// (CI=true) a missing server is a failure.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but no prometheus binary in $PATH (Debian package prometheus): %v", err)
	}
	t.Skipf("no prometheus binary (install Debian's prometheus package; CI=true makes this a failure): %v", err)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs a Prometheus server scraping target every 200 ms
// and returns its base URL; the test's cleanup stops it.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 200ms, scrape_timeout: 200ms}
scrape_configs:
  - job_name: testbed
    static_configs: [{targets: [%q]}]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("prometheus not ready after 30s:\n%s", log.String())
	return ""
}

// query runs an instant PromQL query and returns its one value, or NaN
// semantics as ok=false when the result is empty.
func query(t *testing.T, base, q string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Status != "success" {
		t.Fatalf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return 0, false
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %s: value %q", q, s)
	}
	return v, true
}

// TestPrometheusScrapesRun: a real Prometheus server scrapes a run's live
// metrics on loopback and, through its HTTP API, sees every request, the
// TTFT histogram's count, requests in flight during the run, and the
// client's CPU.
func TestPrometheusScrapesRun(t *testing.T) {
	t.Parallel()
	bin := prometheusBinary(t)
	prof, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	prof.TTFT, prof.ITL = 20*time.Millisecond, 5*time.Millisecond
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })

	e := New()
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	prom := startPrometheus(t, bin, addr.String())

	const requests, warmup = 40, 2
	plan := harness.Plan{
		Seed:      1,
		Targets:   []harness.Target{{Name: "mock", URL: srv.URL, Model: "m"}},
		Dataset:   harness.Dataset{InputTokens: harness.Dist{Kind: "fixed", A: 8}, OutputTokens: harness.Dist{Kind: "fixed", A: 8}},
		Load:      harness.Load{Concurrency: []int{2}, Requests: requests, Warmup: warmup},
		IgnoreEOS: true,
	}
	opts := append(e.Options(50*time.Millisecond), harness.WithoutClientMonitor())
	res, err := harness.Run(context.Background(), plan, t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The run is over; the exporter still serves its final figures.
	checks := []struct {
		q    string
		want func(float64) bool
		what string
	}{
		{`sum(testbed_requests_total{class="ok"})`, func(v float64) bool { return v == float64(res.Info.Records) }, "every request"},
		{`sum(testbed_ttft_seconds_count)`, func(v float64) bool { return v == requests }, "measured TTFTs"},
		{`sum(testbed_output_tokens_total)`, func(v float64) bool { return v == 8*float64(res.Info.Records) }, "output tokens"},
		{`max_over_time(testbed_requests_in_flight[5m])`, func(v float64) bool { return v >= 1 && v <= 2 }, "in flight during the run"},
		{`process_cpu_seconds_total{job="testbed"}`, func(v float64) bool { return v > 0 }, "client CPU"},
	}
	for _, c := range checks {
		var v float64
		var ok bool
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if v, ok = query(t, prom, c.q); ok && c.want(v) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !ok || !c.want(v) {
			t.Errorf("%s: %s = %g (present %t)", c.what, c.q, v, ok)
		}
	}
}
