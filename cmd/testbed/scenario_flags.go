package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness"
)

// scenarioFlags are bench's switches for the methodology's scenarios
// (harness.Scenarios), so a quick run needs no plan file.
type scenarioFlags struct {
	coldStart   time.Duration
	longContext string
	stream      bool
	connection  bool
	split       string
	requests    int
}

// register adds the flags to fs.
func (f *scenarioFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(
		&f.coldStart,
		"cold-start",
		0,
		"cold-start scenario: idle gap before each cold request, e.g. 30s (longer than the server's idle timeout)",
	)
	fs.StringVar(
		&f.longContext,
		"long-context",
		"",
		"long-context scenario: input-token buckets, e.g. 2048,4096,8192, or 'default' (2K…32K)",
	)
	fs.BoolVar(&f.stream, "compare-stream", false, "streaming vs non-streaming scenario: the same load both ways")
	fs.BoolVar(
		&f.connection,
		"compare-connection",
		false,
		"connection scenario: keep-alive vs a new connection (and TLS handshake) per request",
	)
	fs.StringVar(
		&f.split,
		"throughput-split",
		"",
		"request vs token throughput scenario: SHORT,LONG output tokens, e.g. 16,1024",
	)
	fs.IntVar(&f.requests, "scenario-requests", 0, "requests per scenario step (0 = each scenario's default)")
}

// scenarios turns the flags into plan scenarios; nil when none was asked.
func (f *scenarioFlags) scenarios() (*harness.Scenarios, error) {
	var s harness.Scenarios
	n := f.requests
	if f.coldStart > 0 {
		s.ColdStart = &harness.ColdStartScenario{Idle: harness.Duration(f.coldStart), Requests: n}
	}
	if f.longContext != "" {
		lc := &harness.LongContextScenario{Requests: n}
		if f.longContext != "default" {
			b, err := ints(f.longContext)
			if err != nil {
				return nil, fmt.Errorf("--long-context: %w", err)
			}
			lc.Buckets = b
		}
		s.LongContext = lc
	}
	if f.stream {
		s.Streaming = &harness.PairScenario{Requests: n}
	}
	if f.connection {
		s.Connection = &harness.PairScenario{Requests: n}
	}
	if f.split != "" {
		v, err := ints(f.split)
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("--throughput-split: want SHORT,LONG output tokens, e.g. 16,1024, got %q", f.split)
		}
		s.Throughput = &harness.ThroughputScenario{ShortOutput: v[0], LongOutput: v[1], Requests: n}
	}
	if s == (harness.Scenarios{}) {
		return nil, nil
	}
	return &s, nil
}

// ints parses a comma-separated list of positive integers.
func ints(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", p)
		}
		out = append(out, v)
	}
	return out, nil
}
