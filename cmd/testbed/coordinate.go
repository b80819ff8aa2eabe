package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/llm-testbed/testbed/harness"
)

func init() {
	register(command{name: "coordinate", summary: "start the shards of a scaled-out run together (testbed run --shard)",
		run: runCoordinate})
}

// runCoordinate serves the shards' coordinator until every shard has
// reported its run finished, or ctx ends.
func runCoordinate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "0.0.0.0:7070", "listen address")
	shards := fs.Int("shards", 0, "number of shards (N of --shard I/N)")
	lead := fs.Duration("lead", 200*time.Millisecond, "how far ahead of the last shard's arrival a step starts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed coordinate --shards N [--addr 0.0.0.0:7070] [--lead 200ms]")
		fmt.Fprintln(stderr, "shards run: testbed run PLAN --shard I/N --coordinator http://HOST:7070")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *shards < 1 {
		return fmt.Errorf("coordinate needs --shards N (N ≥ 1) and no arguments: %w", errUsage)
	}
	c, err := harness.NewCoordinator(*shards, *lead)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("coordinate: %w", err)
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "coordinating %d shards (group %s) on %s\n", *shards, c.Group(), ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-c.Done():
		fmt.Fprintln(stdout, "every shard finished")
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("coordinate: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coordinate: %w", err)
	}
	return nil
}
