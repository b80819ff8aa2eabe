package fit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/llm-testbed/testbed/harness/results"
)

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
func readServerBatch(dir string) (ServerBatch, bool, error) {
	f, err := os.Open(filepath.Join(dir, results.ServerMetricsFile))
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

// decodeServerBatch reads the batch evidence of a server_metrics.jsonl. A
// damaged line is counted as Malformed and ends the reading: the scrapes
// before it still count.
func decodeServerBatch(r io.Reader) (ServerBatch, error) {
	var b ServerBatch
	samples, err := results.DecodeSamples(r)
	if err != nil {
		b.Malformed++
	}
	for i := range samples {
		s := &samples[i]
		if len(s.Metrics) == 0 {
			continue // a failed scrape keeps its place but says nothing
		}
		run, haveRun := s.Family(runningSeries...)
		wait, _ := s.Family(waitingSeries...)
		kv, _ := s.Family(kvSeries...)
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
	return b, nil
}
