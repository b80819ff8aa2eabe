package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/netem"
)

func init() {
	register(command{name: "bench", summary: "quick load run from flags, no plan file", run: runBench})
}

// intList is a flag like "1,5,10".
// benchPlan turns bench's flags into a plan.
//
// more registers further flags of the command (store, live metrics).
func benchPlan(args []string, stderr io.Writer, more ...func(*flag.FlagSet)) (harness.Plan, string, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var p harness.Plan
	t := harness.Target{Name: "target"}
	var conc intList
	var rates floatList
	p.Dataset.InputTokens, _ = harness.ParseDist("fixed:128")
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:128")
	stream := true
	fs.StringVar(&t.URL, "url", "", "server base URL, with or without /v1 (required)")
	fs.StringVar(&t.Model, "model", "", "model name (required for chat and completions)")
	fs.StringVar(&t.API, "api", harness.APIChat, "API: chat, completions or tgi")
	fs.StringVar(&t.Name, "name", "target", "target name in results")
	fs.StringVar(&t.APIKeyEnv, "api-key-env", "", "environment variable holding the API key")
	fs.Var(&conc, "concurrency", "closed-loop concurrency ladder, e.g. 1,5,10")
	fs.Var(&rates, "rate", "open-loop rate ladder in requests/s, e.g. 10,20")
	fs.StringVar(&p.Load.Arrival, "arrival", harness.ArrivalPoisson, "open-loop arrivals: constant, poisson or gamma")
	fs.Float64Var(&p.Load.Burstiness, "burstiness", 1, "gamma shape: 1 = Poisson, < 1 burstier, > 1 smoother")
	fs.IntVar(&p.Load.Requests, "requests", 0, "measured requests per step (default 50 unless --duration)")
	fs.Var(durationFlag{&p.Load.Duration}, "duration", "measured time per step, e.g. 30s")
	fs.IntVar(&p.Load.Warmup, "warmup", 0, "warm-up requests per step, excluded from the statistics")
	fs.IntVar(
		&p.Load.MaxInFlight,
		"max-in-flight",
		0,
		"cap on requests in flight in open loop (0 = none); waiting is reported",
	)
	fs.Var(
		&p.Dataset.InputTokens,
		"input-tokens",
		"input length: fixed:N, uniform:A,B, normal:M,SD, lognormal:M,SD, empirical:FILE",
	)
	fs.Var(&p.Dataset.OutputTokens, "output-tokens", "output length, same forms as --input-tokens")
	fs.StringVar(
		&p.Dataset.Prompts,
		"prompts",
		"",
		"prompt file (JSONL or ShareGPT .json) instead of synthetic prompts",
	)
	fs.BoolVar(&stream, "stream", true, "stream responses")
	fs.Int64Var(&p.Seed, "seed", 1, "seed for requests and arrivals")
	fs.StringVar(&p.Connection, "connection", "reuse", "reuse connections, or new for one per request")
	fs.StringVar(&p.HTTP, "http", "1.1", "HTTP version: 1.1 or 2")
	fs.BoolVar(&p.IgnoreEOS, "ignore-eos", false, "ask the server to generate exactly max_tokens (vLLM's ignore_eos)")
	fs.BoolVar(&p.TLS.InsecureSkipVerify, "insecure", false, "accept any TLS certificate")
	fs.StringVar(&p.TLS.CAFile, "ca-file", "", "CA certificate (PEM) for https targets")
	fs.IntVar(&p.Retry.RateLimited, "retry-429", 0, "retries per request after 429, honouring Retry-After")
	fs.Var(durationFlag{&p.SLO.TTFT}, "slo-ttft", "goodput SLO on TTFT, e.g. 500ms")
	fs.Var(durationFlag{&p.SLO.TPOT}, "slo-tpot", "goodput SLO on TPOT")
	fs.Var(durationFlag{&p.SLO.E2E}, "slo-e2e", "goodput SLO on end-to-end latency")
	fs.Var(durationFlag{&p.Timeouts.Request}, "timeout", "whole-request timeout (default 10m)")
	netemArg := fs.String("netem", "", "emulated link in front of the target: a profile ("+
		strings.Join(netem.ProfileNames(), ", ")+") or a YAML file of figures (docs/netem.md)")
	fs.Var(durationFlag{&p.Timeouts.Grace}, "grace",
		"after Ctrl-C, how long in-flight requests may finish (default 10s); a second Ctrl-C ends it at once")
	out := fs.String("o", "", "results directory (default results/bench-<time>)")
	var sf scenarioFlags // scenario_flags.go
	sf.register(fs)
	var smp samplingFlags // sampling.go
	smp.register(fs)
	for _, reg := range more {
		reg(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return p, "", err
	}
	scen, err := sf.scenarios()
	if err != nil {
		return p, "", err
	}
	p.Scenarios = scen
	smp.apply(&p)
	if fs.NArg() > 0 {
		return p, "", fmt.Errorf("bench takes no arguments, got %q: %w", fs.Args(), errUsage)
	}
	if *netemArg != "" {
		n, err := harness.LoadNetwork(*netemArg)
		if err != nil {
			return p, "", fmt.Errorf("--netem: %w", err)
		}
		t.Network = &n
	}
	if t.URL == "" {
		return p, "", fmt.Errorf("bench needs --url: %w", errUsage)
	}
	if p.Dataset.Prompts != "" {
		p.Dataset.InputTokens = harness.Dist{}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["output-tokens"] {
			p.Dataset.OutputTokens = harness.Dist{}
		}
	}
	if len(conc) == 0 && len(rates) == 0 && scen == nil {
		conc = intList{1}
	}
	if p.Load.Requests == 0 && p.Load.Duration == 0 {
		p.Load.Requests = 50
	}
	p.Load.Concurrency, p.Load.Rate = conc, rates
	p.Stream = &stream
	p.Targets = []harness.Target{t}
	p.SetDefaults()
	if err := p.Validate(); err != nil {
		return p, "", err
	}
	return p, *out, nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var st storeFlags
	var lf liveFlags
	p, out, err := benchPlan(args, stderr, func(fs *flag.FlagSet) {
		st.register(fs, true)
		lf.register(fs)
	})
	if err != nil {
		return err
	}
	return runPlan(ctx, p, resultsDir(out, "bench"), stdout, stderr, runSetup{kind: "bench", store: &st, live: &lf})
}
