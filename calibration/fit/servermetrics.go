package fit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ServerMetricsFile is where a run keeps its scrapes of the server's
// Prometheus metrics, one JSON object per scrape: {"t_ns":…,"metrics":{
// "vllm:num_requests_running{model_name=\"m\"}":12,…}}.
const ServerMetricsFile = "server_metrics.jsonl"

// Batch evidence from the server's own gauges (vLLM, TGI, the mock).
var (
	runningSeries = []string{"vllm:num_requests_running", "tgi_batch_current_size"}
	waitingSeries = []string{"vllm:num_requests_waiting", "tgi_queue_size"}
	kvSeries      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
)

// ServerBatch is what the server's gauges say about its batch cap.
type ServerBatch struct {
	Scrapes int
	// MaxRunning is the largest running batch scraped; MaxRunningQueued the
	// largest while requests were waiting, the cap when queueing was not
	// due to the KV cache.
	MaxRunning, MaxRunningQueued int
	QueuedScrapes                int     // scrapes with requests waiting
	MaxKVUsage                   float64 // 0..1, of scrapes with requests waiting
	Malformed                    int     // lines that did not parse, counted
}

// readServerBatch reads dir's server metrics, if the run scraped any; ok
// is false when the file does not exist.
func readServerBatch(path string) (ServerBatch, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return ServerBatch{}, false, nil
	}
	if err != nil {
		return ServerBatch{}, false, fmt.Errorf("server metrics: %w", err)
	}
	defer f.Close()
	b, err := decodeServerBatch(f)
	return b, true, err
}

func decodeServerBatch(r io.Reader) (ServerBatch, error) {
	var b ServerBatch
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			b.Malformed++
			continue
		}
		if len(line.Metrics) == 0 {
			continue // a failed scrape keeps its place but says nothing
		}
		run, haveRun := sum(line.Metrics, runningSeries)
		wait, _ := sum(line.Metrics, waitingSeries)
		kv, _ := maxOf(line.Metrics, kvSeries)
		if !haveRun {
			continue
		}
		b.Scrapes++
		b.MaxRunning = max(b.MaxRunning, int(run))
		if wait > 0 {
			b.QueuedScrapes++
			b.MaxRunningQueued = max(b.MaxRunningQueued, int(run))
			b.MaxKVUsage = max(b.MaxKVUsage, kv)
		}
	}
	if err := sc.Err(); err != nil {
		return b, fmt.Errorf("server metrics: %w", err)
	}
	return b, nil
}

// sum adds every series whose name (before its labels) is one of names.
func sum(m map[string]float64, names []string) (float64, bool) {
	var total float64
	found := false
	for k, v := range m {
		name, _, _ := strings.Cut(k, "{")
		for _, n := range names {
			if name == n {
				total += v
				found = true
			}
		}
	}
	return total, found
}

func maxOf(m map[string]float64, names []string) (float64, bool) {
	var best float64
	found := false
	for k, v := range m {
		name, _, _ := strings.Cut(k, "{")
		for _, n := range names {
			if name == n && (!found || v > best) {
				best, found = v, true
			}
		}
	}
	return best, found
}
