package serverside

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// newMock serves a real mock (fixed mode, model "m") over httptest.
func newMock(t *testing.T, ttft, itl time.Duration) *httptest.Server {
	t.Helper()
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT, p.ITL = ttft, itl
	m, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(m)
	t.Cleanup(func() { ts.Close(); m.Close() })
	return ts
}

// chat sends one chat request for exactly n output tokens and reads it to the end.
func chat(t *testing.T, base string, n int, stream bool) {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":` +
		strconv.Itoa(n) + `,"ignore_eos":true,"stream":` + strconv.FormatBool(stream) + `}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
		t.Errorf("chat: status %d, %v", resp.StatusCode, err)
	}
}

func TestPrometheusScrapesTheMock(t *testing.T) {
	t.Parallel()
	ts := newMock(t, 5*time.Millisecond, time.Millisecond)
	chat(t, ts.URL, 7, false)
	chat(t, ts.URL, 5, true)

	cases := []struct {
		name     string
		opts     []PrometheusOption
		want     map[string]float64 // series that must be present with these values
		positive []string           // series that must be present and above zero
		absent   []string           // series that must not be kept
	}{
		// The default set keeps vLLM's gauges and counters, and _sum/_count of
		// the latency histograms, but neither the mock's own families nor buckets.
		{"default series", nil, map[string]float64{
			`vllm:generation_tokens_total{model_name="m"}`:           12,
			`vllm:num_requests_running{model_name="m"}`:              0,
			`vllm:num_requests_waiting{model_name="m"}`:              0,
			`vllm:time_to_first_token_seconds_count{model_name="m"}`: 2,
			`vllm:e2e_request_latency_seconds_count{model_name="m"}`: 2,
		}, []string{`vllm:prompt_tokens_total{model_name="m"}`, `vllm:e2e_request_latency_seconds_sum{model_name="m"}`},
			[]string{
				"testbed_mock_emission_lateness_seconds_count",
				`vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m"}`,
			}},
		// A prefix pattern with buckets keeps exactly that family's series.
		{
			"prefix with buckets",
			[]PrometheusOption{WithSeries("vllm:time_to_first*"), WithBuckets(true)},
			map[string]float64{
				`vllm:time_to_first_token_seconds_count{model_name="m"}`:             2,
				`vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"}`:  2,
				`vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m"}`: 0,
			},
			nil,
			[]string{`vllm:generation_tokens_total{model_name="m"}`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPrometheus(ts.URL+"/metrics", c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			var s results.Sample
			if err := p.Read(context.Background(), &s); err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if got, ok := s.Metrics[k]; !ok || got != v {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
				}
			}
			for _, k := range c.absent {
				if _, ok := s.Metrics[k]; ok {
					t.Errorf("%s kept, want it filtered out", k)
				}
			}
			for _, k := range c.positive {
				if s.Metrics[k] <= 0 {
					t.Errorf("%s = %v, want > 0", k, s.Metrics[k])
				}
			}
		})
	}
}

func TestPrometheusDCGMFixture(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/dcgm.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := NewPrometheus("http://dcgm:9400/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMetrics(f, p.keep, false)
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := `{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="gpu-host-1",UUID="GPU-5fb7ea8a-7f6b-4a5c-8e5b-1f0c2d3e4a10",device="nvidia0",gpu="0",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"}`
	want := map[string]float64{
		"DCGM_FI_DEV_GPU_UTIL" + gpu0:      100,
		"DCGM_FI_DEV_FB_USED" + gpu0:       75067,
		"DCGM_FI_DEV_POWER_USAGE" + gpu0:   512.337,
		"DCGM_FI_PROF_SM_ACTIVE" + gpu0:    0.743102,
		"DCGM_FI_PROF_DRAM_ACTIVE" + gpu0:  0.826554,
		"DCGM_FI_DEV_GPU_TEMP" + gpu0:      61,
		"DCGM_FI_DEV_SM_CLOCK" + gpu0:      1980,
		"DCGM_FI_DEV_MEM_CLOCK" + gpu0:     2619,
		"DCGM_FI_PROF_SM_OCCUPANCY" + gpu0: 0.215833,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	// Both GPUs' utilisation, but not the families outside the default set.
	n := 0
	for k := range m {
		if strings.HasPrefix(k, "DCGM_FI_DEV_GPU_UTIL{") {
			n++
		}
		if strings.HasPrefix(k, "DCGM_FI_DEV_XID_ERRORS") || strings.HasPrefix(k, "DCGM_FI_DEV_TOTAL_ENERGY") {
			t.Errorf("%s kept, not in DefaultSeries", k)
		}
	}
	if n != 2 {
		t.Errorf("%d GPU_UTIL series, want 2", n)
	}
}

func TestPrometheusErrors(t *testing.T) {
	t.Parallel()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/garbage":
			io.WriteString(w, "vllm:num_requests_running{model_name=\"m\" 3\n")
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	}))
	t.Cleanup(bad.Close)
	cases := []struct {
		name, path, want string
		timeout          time.Duration
	}{
		{"server error is reported with its status", "/500", "HTTP 500", time.Second}, // 5xx
		{
			"malformed text is a parse error",
			"/garbage",
			"metrics text",
			time.Second,
		}, // parser error names the format
		{
			"a slow endpoint is cut off by the reading's deadline",
			"/slow",
			"deadline",
			50 * time.Millisecond,
		}, // context bound
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPrometheus(bad.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			var s results.Sample
			err = p.Read(ctx, &s)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), bad.URL) {
				t.Errorf("Read error = %v, want one naming the URL and containing %q", err, c.want)
			}
		})
	}
}

func TestNewPrometheusValidates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		opts []PrometheusOption
		want string
	}{
		{"localhost:8000/metrics", nil, "http://"},                             // scheme missing
		{"http://h/metrics", []PrometheusOption{WithSeries()}, "empty series"}, // nothing to keep
		{
			"http://h/metrics",
			[]PrometheusOption{WithSeries("vllm:a", "*")},
			`"*"`,
		}, // keep-everything pattern refused
		{"http://h/metrics", []PrometheusOption{WithSeries("vllm:a", "")}, `series ""`}, // empty name
	}
	for _, c := range cases {
		if _, err := NewPrometheus(c.url, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewPrometheus(%q) error = %v, want it to contain %q", c.url, err, c.want)
		}
	}
}

func TestSeriesKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		labels [][2]string
		want   string
	}{
		{"up", nil, "up"}, // no labels: bare name
		{"m", [][2]string{{"b", "2"}, {"a", "1"}}, `m{a="1",b="2"}`},            // sorted by label name
		{"m", [][2]string{{"msg", `say "hi"` + "\n"}}, `m{msg="say \"hi\"\n"}`}, // values quoted and escaped
	}
	for _, c := range cases {
		if got := SeriesKey(c.name, c.labels); got != c.want {
			t.Errorf("SeriesKey(%q, %v) = %s, want %s", c.name, c.labels, got, c.want)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	if b, err := os.ReadFile("testdata/dcgm.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 4\nh_count 3\n")
	f.Add("# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 2\ns_count 2\n")
	f.Add("g NaN\nu +Inf\n")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseMetrics(strings.NewReader(text), func(string) bool { return true }, true)
		if err != nil {
			return
		}
		for k, v := range m {
			if k == "" || v != v {
				t.Fatalf("bad series %q = %v", k, v)
			}
		}
	})
}
