package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/llm-testbed/testbed/gpu"
)

func init() {
	register(
		command{
			name:    "gpu-agent",
			summary: "serve this host's GPUs (NVML) as Prometheus metrics with DCGM names, for remote sampling",
			run:     runGPUAgent,
		},
	)
}

func runGPUAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9401", "listen address (0.0.0.0:9401 to be scraped from another host)")
	timeout := fs.Duration("timeout", 2*time.Second, "limit on one NVML reading")
	var st serverTimeouts
	st.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed gpu-agent [--addr 127.0.0.1:9401]")
		fmt.Fprintln(
			stderr,
			"Serves /metrics like a DCGM exporter; scrape it with server_metrics in a plan or testbed sample --prometheus.",
		)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *timeout <= 0 {
		return fmt.Errorf("gpu-agent: unexpected arguments or non-positive --timeout: %w", errUsage)
	}
	n, err := gpu.OpenNVML()
	if err != nil {
		return fmt.Errorf("gpu-agent: %w", err)
	}
	defer n.Close()
	mux := http.NewServeMux()
	mux.Handle("/metrics", gpu.NewAgent(n, *timeout))
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("gpu-agent: %w", err)
	}
	srv := st.server(mux)
	fmt.Fprintf(stdout, "gpu-agent: %d GPU(s), metrics on http://%s/metrics\n", n.Devices(), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gpu-agent: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
