package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/llm-testbed/testbed/netem"
)

func init() {
	register(
		command{
			name:    "netem",
			summary: "TCP proxy adding latency, jitter, bandwidth limits, stalls and resets (user space)",
			run:     runNetem,
		},
	)
}

func runNetem(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("netem", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9000", "address to accept clients on")
	upstream := fs.String("upstream", "", "server to forward to, host:port (required)")
	var d netem.Direction
	var upBW, downBW float64 = -1, -1
	fs.DurationVar(&d.Latency, "latency", 0, "one-way latency added in each direction (a round trip pays it twice)")
	fs.DurationVar(&d.Jitter, "jitter", 0, "uniform ± jitter per chunk, seeded; order is kept")
	fs.Var(
		rateFlag{&d.Bandwidth},
		"bandwidth",
		"bandwidth per direction, tc units: 10mbit, 500kbit, 2mbps (bytes); 0 = unlimited",
	)
	fs.Var(rateFlag{&upBW}, "up-bandwidth", "client→server bandwidth, overrides --bandwidth")
	fs.Var(rateFlag{&downBW}, "down-bandwidth", "server→client bandwidth, overrides --bandwidth")
	fs.IntVar(&d.Burst, "burst", 0, "token bucket depth in bytes (0: pace every byte)")
	fs.DurationVar(
		&d.StallEvery,
		"stall-every",
		0,
		"stop the link for --stall-for at every multiple of this after a connection opens",
	)
	fs.DurationVar(&d.StallFor, "stall-for", 0, "length of a stall")
	fs.Float64Var(&d.StallProb, "stall-prob", 0, "chance per chunk of a stall of --stall-for")
	resetAfter := fs.Int64("reset-after", 0, "reset a connection after this many bytes in --reset-dir (0: never)")
	resetProb := fs.Float64("reset-prob", 0, "chance per chunk in --reset-dir that the connection is reset")
	resetDir := fs.String(
		"reset-dir",
		"down",
		"direction whose bytes --reset-after/--reset-prob count: down (server→client), up or both",
	)
	fs.Float64Var(&d.Loss, "loss", 0, "chance per TCP segment of a loss, each way; costs a retransmission delay")
	handshake := fs.Bool(
		"handshake",
		false,
		"hold a new connection's first bytes one round trip, as TCP's handshake does",
	)
	seed := fs.Int64("seed", 1, "seed for jitter, random stalls, losses and resets")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	fs.Usage = func() {
		fmt.Fprintln(
			stderr,
			"usage: testbed netem --upstream HOST:PORT [--listen 127.0.0.1:9000] [--latency 50ms --jitter 5ms --bandwidth "+
				"10mbit ...]",
		)
		fmt.Fprintln(stderr, "Point the client at --listen; each direction of every connection is shaped.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("netem: unexpected arguments %q: %w", fs.Args(), errUsage)
	}
	if *upstream == "" {
		return fmt.Errorf("netem: --upstream is required: %w", errUsage)
	}
	if *duration < 0 {
		return fmt.Errorf("netem: --duration %v must not be negative: %w", *duration, errUsage)
	}
	cfg := netem.Config{Up: d, Down: d, Seed: *seed, Handshake: *handshake}
	if upBW >= 0 {
		cfg.Up.Bandwidth = upBW
	}
	if downBW >= 0 {
		cfg.Down.Bandwidth = downBW
	}
	switch *resetDir {
	case "down":
		cfg.Down.ResetAfter, cfg.Down.ResetProb = *resetAfter, *resetProb
	case "up":
		cfg.Up.ResetAfter, cfg.Up.ResetProb = *resetAfter, *resetProb
	case "both":
		cfg.Down.ResetAfter, cfg.Down.ResetProb = *resetAfter, *resetProb
		cfg.Up.ResetAfter, cfg.Up.ResetProb = *resetAfter, *resetProb
	default:
		return fmt.Errorf("netem: --reset-dir %q: want down, up or both: %w", *resetDir, errUsage)
	}
	p, err := netem.New(*upstream, cfg)
	if err != nil {
		return err
	}
	if err := p.Listen(*listen); err != nil {
		return err
	}
	desc, _ := json.Marshal(cfg)
	fmt.Fprintf(stdout, "netem: %s -> %s %s\n", p.Addr(), *upstream, desc)
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	<-ctx.Done()
	cerr := p.Close()
	st, _ := json.Marshal(p.Stats())
	fmt.Fprintf(stdout, "netem: stopped %s\n", st)
	return cerr
}
