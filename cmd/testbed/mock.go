package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func init() {
	register(command{name: "mock", summary: "serve the calibrated mock OpenAI/TGI server", run: runMock})
}

// mockFlags are the flags of `testbed mock`. Profile fields are applied only
// when their flag is given explicitly, so a flag overrides the profile and
// an absent flag leaves it alone.
type mockFlags struct {
	addr, model, profile, apiKey string
	seed                         int64
	grace                        time.Duration

	ttft, itl, startupDelay, coldStart, idleTimeout time.Duration
	maxNumSeqs, maxModelLen, maxWaiting             int
	jitter                                          string
	jitterCV                                        float64

	rpm, tpm, maxConcurrency int
	answerMin, answerMax     int
	maxBody                  int64

	faults   mockllm.FaultConfig
	timeouts serverTimeouts
	keyEnv   string
}

func runMock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f mockFlags
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8000", "listen address (loopback by default; port 0 picks a free one)")
	fs.StringVar(&f.model, "model", mockllm.DefaultModel, "served model name")
	fs.StringVar(
		&f.profile,
		"profile",
		"ideal",
		"cost profile: a preset ("+strings.Join(engine.PresetNames(), ", ")+") or a YAML file",
	)
	fs.Int64Var(&f.seed, "seed", 0, "seed of text, answer lengths, faults and jitter")
	fs.StringVar(&f.apiKey, "api-key", "", "require this bearer token on every endpoint but /health and /metrics")
	fs.StringVar(&f.keyEnv, "api-key-env", "",
		"read the API key from this environment variable (keeps it off the command line)")
	f.timeouts.register(fs)
	fs.DurationVar(
		&f.grace,
		"grace",
		10*time.Second,
		"on SIGINT/SIGTERM, how long in-flight streams may finish before they are ended with an error event",
	)

	fs.DurationVar(&f.ttft, "ttft", 0, "fixed-mode time to first token (switches the profile to fixed mode)")
	fs.DurationVar(&f.itl, "itl", 0, "fixed-mode inter-token latency (switches the profile to fixed mode)")
	fs.StringVar(&f.jitter, "jitter", "", "fixed-mode jitter distribution: none, normal, lognormal, uniform")
	fs.Float64Var(&f.jitterCV, "jitter-cv", 0, "coefficient of variation of the jitter")
	fs.IntVar(&f.maxNumSeqs, "max-num-seqs", 0, "engine mode: running batch limit")
	fs.IntVar(&f.maxModelLen, "max-model-len", 0, "prompt + output token limit (vLLM's 400 above it)")
	fs.IntVar(&f.maxWaiting, "max-waiting", 0, "waiting-queue limit (503 beyond it; 0 = unbounded)")
	fs.DurationVar(&f.startupDelay, "startup-delay", 0, "how long /health answers 503 after start")
	fs.DurationVar(
		&f.coldStart,
		"cold-start",
		0,
		"extra delay of the first request (and the first after --idle-timeout)",
	)
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 0, "idle time after which the next request pays --cold-start again")

	fs.IntVar(&f.rpm, "rpm", 0, "requests per minute limit (OpenAI 429 beyond it; 0 = none)")
	fs.IntVar(&f.tpm, "tpm", 0, "tokens per minute limit, prompt + max_tokens (0 = none)")
	fs.IntVar(
		&f.maxConcurrency,
		"max-concurrency",
		0,
		"requests in flight limit (TGI's overloaded 429 beyond it; 0 = none)",
	)
	fs.IntVar(&f.answerMin, "answer-min", mockllm.DefaultAnswerMin, "shortest natural answer (tokens before EOS)")
	fs.IntVar(&f.answerMax, "answer-max", mockllm.DefaultAnswerMax, "longest natural answer")
	fs.Int64Var(&f.maxBody, "max-body", mockllm.DefaultMaxBodyBytes, "request body limit in bytes (413 beyond it)")

	fs.Float64Var(&f.faults.ServerErrorRate, "fault-server-error", 0, "probability of a 500 before the first byte")
	fs.Float64Var(&f.faults.RateLimitRate, "fault-rate-limit", 0, "probability of an injected 429")
	fs.DurationVar(&f.faults.RetryAfter, "fault-retry-after", time.Second, "retry-after of an injected 429")
	fs.Float64Var(&f.faults.StreamCutRate, "fault-stream-cut", 0, "probability of cutting a stream's connection")
	fs.IntVar(&f.faults.StreamCutAfter, "fault-stream-cut-after", 0, "tokens written before a cut (0 = random)")
	fs.Float64Var(&f.faults.StallRate, "fault-stall", 0, "probability of a mid-stream stall")
	fs.DurationVar(&f.faults.StallDuration, "fault-stall-duration", 500*time.Millisecond, "length of a stall")
	fs.IntVar(&f.faults.TokensPerEvent, "tokens-per-event", 1, "tokens per SSE event")
	fs.DurationVar(&f.faults.PacingInterval, "pacing", 0, "release tokens only on this fixed tick (0 = off)")
	fs.BoolVar(
		&f.faults.EarlyFirstByte,
		"early-first-byte",
		false,
		"flush headers and the role chunk on arrival, long before the first token",
	)
	tlsOn := fs.Bool("tls", false, "serve HTTPS with a generated self-signed certificate (mocktls.go)")
	certOut := fs.String(
		"tls-cert-out",
		"",
		"with --tls: write the certificate (PEM) here, for a client's CA file (plan tls.ca_file, bench --ca-file)",
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: testbed mock [flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mock takes no arguments, got %q: %w", fs.Args(), errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.keyEnv != "" {
		if f.apiKey != "" {
			return fmt.Errorf("mock: --api-key and --api-key-env are exclusive: %w", errUsage)
		}
		if f.apiKey = os.Getenv(f.keyEnv); f.apiKey == "" {
			return fmt.Errorf("mock: --api-key-env %s: the variable is unset or empty", f.keyEnv)
		}
	}

	prof, err := mockProfile(f, set)
	if err != nil {
		return err
	}
	srv, err := mockllm.New(
		mockllm.WithProfile(prof), mockllm.WithModel(f.model), mockllm.WithSeed(f.seed), mockllm.WithWarnings(stderr),
		mockllm.WithAPIKey(f.apiKey), mockllm.WithFaults(f.faults),
		mockllm.WithLimits(mockllm.LimitConfig{RPM: f.rpm, TPM: f.tpm, MaxConcurrency: f.maxConcurrency}),
		mockllm.WithAnswerLength(f.answerMin, f.answerMax), mockllm.WithMaxBodyBytes(f.maxBody),
	)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("mock: listen on --addr %s: %w", f.addr, err)
	}
	scheme := "http"
	if *tlsOn {
		if ln, err = listenTLS(ln, *certOut); err != nil {
			return err
		}
		scheme = "https"
	}
	fmt.Fprintf(
		stdout,
		"testbed mock: serving model %q (profile %s, %s mode) on %s://%s\n",
		f.model,
		prof.Name,
		prof.Mode,
		scheme,
		ln.Addr(),
	)
	if v := prof.Validity; v.Stated() {
		fmt.Fprintf(stdout, "testbed mock: the profile was fitted on %d–%d requests in flight and prompts of "+
			"%d–%d tokens; outside them it warns once on stderr and counts testbed_mock_outside_validity_total\n",
			v.MinInFlight, v.MaxInFlight, v.MinPromptTokens, v.MaxPromptTokens)
	}
	return serveMock(ctx, f.timeouts.server(srv), srv, ln, f.grace, stderr)
}

// mockProfile loads --profile and applies the explicitly given flags.
func mockProfile(f mockFlags, set map[string]bool) (engine.Profile, error) {
	var p engine.Profile
	var err error
	if isPreset(f.profile) {
		p, err = engine.Preset(f.profile)
	} else {
		p, err = engine.LoadProfile(f.profile)
	}
	if err != nil {
		return p, fmt.Errorf("mock: --profile: %w", err)
	}
	if set["ttft"] || set["itl"] {
		p.Mode = engine.ModeFixed
		if p.ITL == 0 {
			p.ITL = 20 * time.Millisecond // engine profiles carry no ITL; fixed mode needs one
		}
	}
	apply := []struct {
		flag string
		do   func()
	}{
		{"ttft", func() { p.TTFT = f.ttft }},
		{"itl", func() { p.ITL = f.itl }},
		{"jitter", func() { p.Jitter.Dist = f.jitter }},
		{"jitter-cv", func() { p.Jitter.CV = f.jitterCV }},
		{"max-num-seqs", func() { p.MaxNumSeqs = f.maxNumSeqs }},
		{"max-model-len", func() { p.MaxModelLen = f.maxModelLen }},
		{"max-waiting", func() { p.MaxWaiting = f.maxWaiting }},
		{"startup-delay", func() { p.StartupDelay = f.startupDelay }},
		{"cold-start", func() { p.ColdStart = f.coldStart }},
		{"idle-timeout", func() { p.IdleTimeout = f.idleTimeout }},
	}
	for _, a := range apply {
		if set[a.flag] {
			a.do()
		}
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("mock: %w", err)
	}
	return p, nil
}

func isPreset(name string) bool {
	for _, n := range engine.PresetNames() {
		if n == name {
			return true
		}
	}
	if _, err := os.Stat(name); err == nil {
		return false
	}
	return !strings.ContainsAny(name, "./")
}

// serveMock serves until ctx ends, then stops accepting, lets in-flight
// streams finish for grace, ends the rest with an error event and returns.
func serveMock(ctx context.Context, hs *http.Server, srv *mockllm.Server, ln net.Listener, grace time.Duration,
	stderr io.Writer) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("mock: serve: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintf(stderr, "testbed mock: shutting down, in-flight streams have %v\n", grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shutdownDone := make(chan error, 1)
	go func() {
		// Shutdown closes the listener at once; it returns when every
		// handler has, which Drain guarantees shortly after grace.
		sctx, scancel := context.WithTimeout(context.Background(), grace+5*time.Second)
		defer scancel()
		shutdownDone <- hs.Shutdown(sctx)
	}()
	if err := srv.Drain(graceCtx); err != nil {
		fmt.Fprintln(stderr, "testbed mock: grace period over, ended the remaining streams")
	}
	if err := <-shutdownDone; err != nil {
		hs.Close()
		return fmt.Errorf("mock: shutdown: %w", err)
	}
	<-errc // http.ErrServerClosed
	return nil
}
