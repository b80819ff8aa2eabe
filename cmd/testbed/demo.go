package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/report"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func init() {
	register(
		command{
			name:    "demo",
			summary: "start the mock in-process and run a short concurrency ladder against it",
			run:     runDemo,
		},
	)
}

// runDemo is a newcomer's first result: no server to set up. The mock runs
// in this process on a loopback port with a real engine profile (so
// latency grows with load), and a short ladder runs against it through
// the same path as `testbed run`.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "results directory (default results/demo-<time>)")
	profile := fs.String("profile", "llama3-8b-h100", "mock profile preset: "+fmt.Sprint(engine.PresetNames()))
	conc := intList{1, 4, 16}
	fs.Var(&conc, "concurrency", "concurrency ladder")
	rounds := fs.Int("rounds", 3, "measured requests per step, in multiples of its concurrency (at least 12)")
	in, _ := harness.ParseDist("fixed:256")
	outTok, _ := harness.ParseDist("fixed:64")
	fs.Var(&in, "input-tokens", "prompt length distribution")
	fs.Var(&outTok, "output-tokens", "output length distribution")
	var st storeFlags
	st.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	prof, err := engine.Preset(*profile)
	if err != nil {
		return err
	}
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("demo"), mockllm.WithSeed(1))
	if err != nil {
		return err
	}
	defer m.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := serverTimeouts{readHeader: 10 * time.Second, read: time.Minute, idle: 2 * time.Minute}.server(m)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stderr, "mock (profile %s) serving at %s\n", prof.Name, url)

	p := harness.Plan{
		Name:      "demo",
		Seed:      1,
		Targets:   []harness.Target{{Name: "mock", URL: url, Model: "demo"}},
		Dataset:   harness.Dataset{InputTokens: in, OutputTokens: outTok},
		IgnoreEOS: true,
	}
	// Each step: one warm-up round (connections, cold start), then a few
	// measured rounds, so every step takes about the same time.
	for _, c := range conc {
		warm := c
		p.Extra = append(
			p.Extra,
			harness.StepSpec{
				Scenario:    harness.ScenarioConcurrency,
				Concurrency: c,
				Requests:    max(12, *rounds*c),
				Warmup:      &warm,
			},
		)
	}
	dir := resultsDir(*out, "demo")
	err = runPlan(ctx, p, dir, stdout, stderr, runSetup{kind: "demo", store: &st})

	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutCtx); serr != nil {
		err = errors.Join(err, serr)
	}
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err == nil {
		err = writeDemoReport(dir, stdout)
	}
	return err
}

// writeDemoReport writes report.md and report.html into the demo's
// results directory and says where they are: a newcomer's first result
// should be something to open.
func writeDemoReport(dir string, stdout io.Writer) error {
	r, err := report.Load(dir, analysis.Options{})
	if err != nil {
		return err
	}
	if err := analysis.Write(dir, r.Analysis); err != nil {
		return err
	}
	if err := report.Write(dir, []*report.Run{r}); err != nil {
		return err
	}
	page, err := filepath.Abs(filepath.Join(dir, results.ReportHTML))
	if err != nil {
		page = filepath.Join(dir, results.ReportHTML)
	}
	fmt.Fprintf(stdout, "report: %s\n(open it in a browser; rebuild it any time with: testbed report %s)\n", page, dir)
	return nil
}
