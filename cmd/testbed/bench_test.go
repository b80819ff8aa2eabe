package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBenchPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, p planView)
		wantErr string
	}{
		// Ladders, arrivals and distributions parse into the plan.
		{
			"ladders",
			[]string{"--url", "http://127.0.0.1:1/v1", "--model", "m", "--concurrency", "1,5,10", "--rate", "10,20.5",
				"--arrival", "gamma", "--burstiness", "0.5", "--duration", "5s", "--warmup", "3", "--input-tokens", "uniform:64,256",
				"--output-tokens", "lognormal:128,32", "--stream=false", "--seed", "9", "-o", "dir"},
			func(t *testing.T, p planView) {
				if !reflect.DeepEqual(p.conc, []int{1, 5, 10}) || !reflect.DeepEqual(p.rate, []float64{10, 20.5}) {
					t.Errorf("ladders %v %v", p.conc, p.rate)
				}
				if p.arrival != "gamma" || p.burst != 0.5 || p.duration != 5*time.Second || p.warmup != 3 || p.in != "uniform:64,256" ||
					p.out != "lognormal:128,32" || p.stream || p.seed != 9 || p.dir != "dir" ||
					p.requests != 0 {
					t.Errorf("plan %+v", p)
				}
			},
			"",
		},
		// Defaults: one step at concurrency 1, 50 requests, streaming.
		{"defaults", []string{"--url", "http://h:1", "--model", "m"}, func(t *testing.T, p planView) {
			if !reflect.DeepEqual(p.conc, []int{1}) || p.requests != 50 || !p.stream || p.in != "fixed:128" {
				t.Errorf("defaults %+v", p)
			}
		}, ""},
		// --url is required.
		{"no url", []string{"--model", "m"}, nil, "needs --url"},
		// A bad distribution is rejected by its flag type.
		{"bad dist", []string{"--url", "http://h:1", "--model", "m", "--input-tokens", "zipf:1"}, nil, "usage"},
		// A bad ladder value is rejected by its flag type.
		{"bad ladder", []string{"--url", "http://h:1", "--model", "m", "--concurrency", "1,x"}, nil, "usage"},
		// Plan validation still applies: unknown API.
		{"bad api", []string{"--url", "http://h:1", "--model", "m", "--api", "soap"}, nil, "targets[0].api"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, dir, err := benchPlan(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, planView{
				conc: p.Load.Concurrency, rate: p.Load.Rate, arrival: p.Load.Arrival, burst: p.Load.Burstiness,
				duration: p.Load.Duration.D(), warmup: p.Load.Warmup, requests: p.Load.Requests,
				in: p.Dataset.InputTokens.String(), out: p.Dataset.OutputTokens.String(), stream: p.Streaming(), seed: p.Seed, dir: dir,
			})
		})
	}
}

type planView struct {
	conc             []int
	rate             []float64
	arrival          string
	burst            float64
	duration         time.Duration
	warmup, requests int
	in, out          string
	stream           bool
	seed             int64
	dir              string
}

func TestReorderFlags(t *testing.T) {
	t.Parallel()
	got := reorderFlags([]string{"plan.yaml", "-o", "dir"})
	if !reflect.DeepEqual(got, []string{"-o", "dir", "plan.yaml"}) {
		t.Fatalf("reorderFlags = %q", got)
	}
}
