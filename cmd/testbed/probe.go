package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// probe is the health check of the FROM-scratch image: there is no curl
// or shell in it, so `docker run --health-cmd` and compose healthchecks
// run the binary itself.
func init() {
	register(
		command{
			name:    "probe",
			summary: "exit 0 once a URL answers 2xx (health checks in the scratch image)",
			run:     runProbe,
		},
	)
}

func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "limit on one attempt")
	wait := fs.Duration("wait", 0, "keep trying, every 250ms, for up to this long (0: one attempt)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed probe [--timeout 2s] [--wait 0] URL")
		fmt.Fprintln(stderr, "exits 0 once GET URL answers 2xx, e.g. testbed probe http://127.0.0.1:8000/health")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("probe: want exactly one URL, got %d arguments: %w", fs.NArg(), errUsage)
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("probe: %q is not an http(s) URL with a host: %w", fs.Arg(0), errUsage)
	}
	if *timeout <= 0 || *wait < 0 {
		return fmt.Errorf("probe: --timeout must be positive and --wait not negative: %w", errUsage)
	}

	deadline := time.Now().Add(*wait)
	for {
		err = probeOnce(ctx, u.String(), *timeout)
		if err == nil {
			fmt.Fprintln(stdout, "ok", u)
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("probe: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("probe: %w (last attempt: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func probeOnce(ctx context.Context, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}
