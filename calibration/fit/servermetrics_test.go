package fit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

func TestServerBatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		lines     string
		want      ServerBatch
		wantCap   int    // after applyServerBatch to a fit that saw no cap
		wantSrc   string // its CapSource
		wantError bool
	}{
		// vLLM: requests waited while 8 ran, the KV cache a third full: the cap is 8.
		{
			"vllm queued",
			`{"t_ns":1,"metrics":{"vllm:num_requests_running{model_name=\"m\"}":3,"vllm:num_requests_waiting{model_name=\"m\"}":0}}
{"t_ns":2,"metrics":{"vllm:num_requests_running{model_name=\"m\"}":8,"vllm:num_requests_waiting{model_name=\"m\"}":5,"vllm:kv_cache_usage_perc{model_name=\"m\"}":0.33}}
`,
			ServerBatch{Scrapes: 2, MaxRunning: 8, MaxRunningQueued: 8, QueuedScrapes: 1, MaxKVUsage: 0.33},
			8,
			"server metrics",
			false,
		},
		// Waiting with the KV cache full: the batch was limited by memory,
		// not by max_num_seqs, so the gauges say nothing about the cap.
		{
			"kv full",
			`{"t_ns":1,"metrics":{"vllm:num_requests_running":5,"vllm:num_requests_waiting":9,"vllm:kv_cache_usage_perc":0.99}}
`,
			ServerBatch{Scrapes: 1, MaxRunning: 5, MaxRunningQueued: 5, QueuedScrapes: 1, MaxKVUsage: 0.99},
			256,
			"not reached",
			false,
		},
		// TGI's gauges; a failed scrape and a torn line are counted or skipped, never fatal.
		{"tgi", `{"t_ns":1,"metrics":{"tgi_batch_current_size":4,"tgi_queue_size":2}}
{"t_ns":2,"error":"connection refused"}
{"t_ns":3,"metr
`, ServerBatch{Scrapes: 1, MaxRunning: 4, MaxRunningQueued: 4, QueuedScrapes: 1, Malformed: 1}, 4, "server metrics", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeServerBatch(strings.NewReader(tc.lines))
			if (err != nil) != tc.wantError || got != tc.want {
				t.Fatalf("decode = %+v, %v; want %+v", got, err, tc.want)
			}
			e := &Engine{MaxNumSeqs: 256, CapSource: "not reached"}
			e.applyServerBatch(got)
			if e.MaxNumSeqs != tc.wantCap || e.CapSource != tc.wantSrc {
				t.Errorf("cap %d from %q, want %d from %q", e.MaxNumSeqs, e.CapSource, tc.wantCap, tc.wantSrc)
			}
		})
	}
}

// Dir reads server_metrics.jsonl beside requests.jsonl and takes the
// cap from it when the reconstruction never saw the batch full.
func TestFitDirServerMetrics(t *testing.T) {
	t.Parallel()
	recs := simulate(
		t,
		testEngine(20000, 100, 500, 64, 0, 0),
		[]int{1, 4, 16},
		32,
		time.Second,
		100*time.Microsecond,
		9,
	)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	noMetrics, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if noMetrics.Engine == nil || noMetrics.Engine.CapSource != "not reached" {
		t.Fatalf("without metrics: %+v", noMetrics.Engine)
	}
	lines := `{"t_ns":5,"metrics":{"vllm:num_requests_running{model_name=\"m\"}":48,"vllm:num_requests_waiting{model_name=\"m\"}":3,"vllm:kv_cache_usage_perc{model_name=\"m\"}":0.2}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, results.ServerMetricsFile), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Engine; e == nil || e.CapSource != "server metrics" || res.Profile.MaxNumSeqs != 48 {
		t.Fatalf("with metrics: cap %d from %q", res.Profile.MaxNumSeqs, res.Engine.CapSource)
	}
	var out strings.Builder
	res.Print(&out)
	if !strings.Contains(out.String(), "max_num_seqs = 48: the server's running batch") {
		t.Errorf("report does not say where the cap comes from:\n%s", out.String())
	}
}
