package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
)

// startClientMonitor starts watching this process for a run writing into
// dir: samples go to dir/client.jsonl, a client-bound step is announced on
// stderr. The caller must Stop it after the run.
func startClientMonitor(dir string, stderr io.Writer, opts ...clientmon.Option) (*clientmon.Monitor, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("client monitor: %w", err)
	}
	opts = append([]clientmon.Option{
		clientmon.WithFile(filepath.Join(dir, results.ClientFile)),
		clientmon.WithWarnings(stderr),
	}, opts...)
	return clientmon.New(opts...)
}
