package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
)

func TestBenchScenarioFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--url", "http://127.0.0.1:1", "--model", "m"}
	cases := []struct {
		name    string
		args    []string
		check   func(t *testing.T, p harness.Plan)
		wantErr string
	}{
		// Every scenario switch lands in the plan, with its defaults filled.
		{
			"all",
			[]string{"--cold-start", "30s", "--long-context", "1024,4096", "--compare-stream", "--compare-connection",
				"--throughput-split", "16,1024", "--scenario-requests", "12"},
			func(t *testing.T, p harness.Plan) {
				s := p.Scenarios
				if s == nil || s.ColdStart.Idle.D() != 30*time.Second || s.ColdStart.Requests != 12 ||
					!reflect.DeepEqual(s.LongContext.Buckets, []int{1024, 4096}) || s.LongContext.Requests != 12 ||
					s.Streaming.Requests != 12 || s.Connection.Requests != 12 ||
					s.Throughput.ShortOutput != 16 || s.Throughput.LongOutput != 1024 {
					t.Errorf("scenarios %+v", s)
				}
				// Scenarios alone: no default concurrency ladder in front of them.
				if len(p.Load.Concurrency) != 0 {
					t.Errorf("ladder %v added to a scenario-only bench", p.Load.Concurrency)
				}
			},
			"",
		},
		// "default" buckets are the methodology's 2K…32K.
		{"default buckets", []string{"--long-context", "default"}, func(t *testing.T, p harness.Plan) {
			if !reflect.DeepEqual(p.Scenarios.LongContext.Buckets, harness.DefaultContextBuckets) {
				t.Errorf("buckets %v", p.Scenarios.LongContext.Buckets)
			}
		}, ""},
		// With a ladder asked for, both run.
		{
			"ladder and scenario",
			[]string{"--concurrency", "1,4", "--compare-stream"},
			func(t *testing.T, p harness.Plan) {
				if !reflect.DeepEqual(p.Load.Concurrency, []int{1, 4}) || p.Scenarios.Streaming == nil {
					t.Errorf("plan %+v", p)
				}
			},
			"",
		},
		// No scenario flag: no scenarios.
		{"none", nil, func(t *testing.T, p harness.Plan) {
			if p.Scenarios != nil {
				t.Errorf("scenarios %+v", p.Scenarios)
			}
		}, ""},
		{"bad bucket", []string{"--long-context", "2048,x"}, nil, "--long-context"},    // not a number
		{"bad split", []string{"--throughput-split", "16"}, nil, "--throughput-split"}, // needs two values
		{
			"split order",
			[]string{"--throughput-split", "64,16"},
			nil,
			"throughput_split",
		}, // plan validation names the field
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, _, err := benchPlan(append(append([]string(nil), base...), c.args...), io.Discard)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, p)
		})
	}
}
