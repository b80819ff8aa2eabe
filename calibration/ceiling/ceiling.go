package ceiling

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/clientmon"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Config is a calibration run. The zero value of each field takes the
// default shown by DefaultConfig.
type Config struct {
	// URL is a running mock (`testbed mock`); empty starts one: a child
	// process by default, or in this process with InProcess, where it
	// shares the client's CPU, garbage collector and scheduler.
	URL       string
	InProcess bool
	// MockCommand builds the child mock's command from the mock's flags;
	// nil runs this executable's `mock` subcommand (testbed's own binary).
	MockCommand func(args []string) *exec.Cmd
	Model       string
	// TTFT and ITL of the mock (fixed mode, no jitter): what a started mock
	// serves, and the schedule a remote one is assumed to keep, for its
	// lateness (server_lateness_ms).
	TTFT, ITL time.Duration
	// Request shape.
	InputTokens, OutputTokens int
	// Concurrency and Rates are the two ladders; each stops at its first
	// level over a limit unless KeepGoing.
	Concurrency []int
	Rates       []float64
	// StepDuration is each level's measured time, after a warm-up round.
	StepDuration time.Duration
	KeepGoing    bool
	// Limits of a trustworthy level.
	MaxError    time.Duration // error p99, default 1 ms
	MaxLag      time.Duration // schedule lag p99, default 1 ms
	CPUShare    float64       // client CPU over available cores, default 0.85
	MaxFailures float64       // share of failed requests, default 0.01
	Seed        int64
	// OutDir receives calibration.json, client.jsonl and one results
	// directory per level.
	OutDir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Warnings receives the client monitor's client-bound warnings; nil discards them.
	Warnings io.Writer
}

// DefaultConfig is the calibration `testbed calibrate` runs without flags:
// about a minute and a half when every level runs.
func DefaultConfig() Config {
	return Config{
		Model: mockllm.DefaultModel,
		TTFT:  50 * time.Millisecond, ITL: 20 * time.Millisecond,
		InputTokens: 64, OutputTokens: 32,
		Concurrency:  []int{1, 10, 100, 1000, 2000, 4000},
		Rates:        []float64{10, 100, 500, 1000, 2000},
		StepDuration: 3 * time.Second,
		MaxError:     time.Millisecond, MaxLag: time.Millisecond, CPUShare: 0.85, MaxFailures: 0.01,
		Seed: 1,
	}
}

// QuickConfig is a short calibration for tests and a first look.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Concurrency = []int{1, 10, 100}
	c.Rates = []float64{50, 200}
	c.StepDuration = time.Second
	c.TTFT = 20 * time.Millisecond
	c.ITL = 10 * time.Millisecond
	c.OutputTokens = 16
	return c
}

func (c *Config) fill() {
	d := DefaultConfig()
	c.Model = cmp.Or(c.Model, d.Model)
	c.TTFT = cmp.Or(c.TTFT, d.TTFT)
	c.ITL = cmp.Or(c.ITL, d.ITL)
	c.InputTokens = cmp.Or(c.InputTokens, d.InputTokens)
	c.OutputTokens = cmp.Or(c.OutputTokens, d.OutputTokens)
	if c.Concurrency == nil && c.Rates == nil {
		c.Concurrency, c.Rates = d.Concurrency, d.Rates
	}
	c.StepDuration = cmp.Or(c.StepDuration, d.StepDuration)
	c.MaxError = cmp.Or(c.MaxError, d.MaxError)
	c.MaxLag = cmp.Or(c.MaxLag, d.MaxLag)
	c.CPUShare = cmp.Or(c.CPUShare, d.CPUShare)
	c.MaxFailures = cmp.Or(c.MaxFailures, d.MaxFailures)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// validate checks the config, one rule per field.
func (c *Config) validate() error {
	var errs []error
	for _, r := range []struct {
		bad bool
		msg string
	}{
		{c.OutDir == "", "out dir must be set"},
		{c.TTFT < 0 || c.ITL <= 0, fmt.Sprintf("ttft must be >= 0 and itl > 0, got %v and %v", c.TTFT, c.ITL)},
		{c.InputTokens < 1 || c.OutputTokens < 2, fmt.Sprintf("input tokens must be >= 1 and output tokens >= 2 (ITL needs "+
			"two), got %d and %d", c.InputTokens, c.OutputTokens)},
		{len(c.Concurrency)+len(c.Rates) == 0, "at least one concurrency or rate level is needed"},
		{c.StepDuration <= 0, fmt.Sprintf("step duration must be > 0, got %v", c.StepDuration)},
		{c.CPUShare <= 0 || c.CPUShare > 1, fmt.Sprintf("cpu share must be in (0, 1], got %v", c.CPUShare)},
	} {
		if r.bad {
			errs = append(errs, errors.New("calibrate: "+r.msg))
		}
	}
	for _, n := range c.Concurrency {
		if n < 1 {
			errs = append(errs, fmt.Errorf("calibrate: concurrency levels must be >= 1, got %d", n))
		}
	}
	for _, r := range c.Rates {
		if !(r > 0) {
			errs = append(errs, fmt.Errorf("calibrate: rate levels must be > 0, got %v", r))
		}
	}
	return errors.Join(errs...)
}

// Quantiles are a distribution's p50, p99 and maximum in ms.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// LagQuantiles are the schedule lag's p50 and p99 in ms.
type LagQuantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Level is one load level of a calibration, one entry of calibration.json.
type Level struct {
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	// Requests is the number of measured requests compared with the truth.
	Requests int `json:"requests"`
	// ErrorMS pools every comparison: TTFT, E2E and each inter-token gap,
	// client minus server, absolute. The client's times are the kernel's
	// receive stamps where the records have them (Clock says), so this is
	// the client's error; ErrorUserMS is the same from user-space stamps.
	ErrorMS     Quantiles `json:"error_ms"`
	ErrorUserMS Quantiles `json:"error_user_ms"`
	Clock       string    `json:"clock"` // "kernel", "user" or "mixed": the stamps ErrorMS used
	// ServerLatenessMS is the mock's own lateness: each token chunk's write
	// start minus its schedule (TTFT + i·ITL after dequeue), apart from
	// the client's error, which is measured against the write start.
	ServerLatenessMS Quantiles `json:"server_lateness_ms"`
	// ClientDelayMS is user-space read time minus kernel receive time per
	// token chunk; ChunksCoalesced the chunks that shared a read with a
	// later one, whose stamps are late (included in ErrorMS).
	ClientDelayMS Quantiles `json:"client_delay_ms"`
	// SendDelayMS is the request's own path inside the client: written to
	// the socket (httptrace's WroteRequest) minus handed to the transport.
	// It is part of every TTFT and E2E error, which kernel receive stamps
	// cannot remove; ITL errors hold none of it.
	SendDelayMS      Quantiles    `json:"send_delay_ms"`
	ChunksCoalesced  int64        `json:"chunks_coalesced"`
	ScheduleLagMS    LagQuantiles `json:"schedule_lag_ms"`
	ClientCPUPercent float64      `json:"client_cpu_percent"` // of the available cores, 0..100
	TokensPerS       float64      `json:"tokens_per_s"`
	RequestsPerS     float64      `json:"requests_per_s"`

	// The error by measurement; TTFT and E2E are signed (client − server),
	// so their p50 shows the transport's fixed cost.
	TTFTErrorMS Quantiles `json:"ttft_error_ms"`
	ITLErrorMS  Quantiles `json:"itl_error_ms"`
	E2EErrorMS  Quantiles `json:"e2e_error_ms"`
	// Failed requests, requests without ground truth or with a different
	// number of chunks than the server wrote, and client TTFTs shorter than
	// the server's (impossible for a correct client).
	Failed       int `json:"failed"`
	Unmatched    int `json:"unmatched"`
	ImpossibleTT int `json:"client_ttft_below_server"`

	ClientCores       float64 `json:"available_cores"`
	SchedLatencyP99MS float64 `json:"go_sched_latency_p99_ms"`
	ClientBound       bool    `json:"client_bound"`
	ClientBoundReason string  `json:"client_bound_reason,omitempty"`
	// OverLimit marks the level that stopped its ladder, and why.
	OverLimit bool   `json:"over_limit"`
	Reason    string `json:"reason,omitempty"`
	Dir       string `json:"dir"`
}

// Ceiling is the most the client drove while every limit held.
type Ceiling struct {
	Concurrency  int     `json:"concurrency"`
	RequestsPerS float64 `json:"requests_per_s"`
	TokensPerS   float64 `json:"tokens_per_s"`
	Reason       string  `json:"reason"`
}

// Report is calibration.json.
type Report struct {
	Levels  []Level `json:"levels"`
	Ceiling Ceiling `json:"ceiling"`
	// Mock says where the mock ran; in-process it shared the CPU with the client.
	Mock     string `json:"mock"`
	Sentence string `json:"sentence"`
	// Interrupted is set when the run was stopped (Ctrl-C) before its ladders ended.
	Interrupted bool      `json:"interrupted,omitempty"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
}

// Find runs the ladders against the mock and compares every client
// measurement with the mock's ground truth. It writes OutDir/calibration.json
// and returns the report.
func Find(ctx context.Context, cfg Config) (*Report, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	rep := &Report{Start: time.Now()}
	var truth truthSource
	url := cfg.URL
	switch {
	case url != "":
		truth = &remoteTruth{base: baseURL(url)}
		rep.Mock = "at " + url + " (another process; its schedule assumed TTFT " + cfg.TTFT.String() +
			", ITL " + cfg.ITL.String() + " for its lateness)"
	case cfg.InProcess:
		m, err := startMock(cfg)
		if err != nil {
			return nil, err
		}
		defer m.close()
		url, truth = m.url, m
		rep.Mock = fmt.Sprintf("in-process at %s (fixed TTFT %v, ITL %v): the mock shares this process's CPU, "+
			"garbage collector and scheduler with the client, so the figures are the pair's", url, cfg.TTFT, cfg.ITL)
	default:
		m, err := startChild(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer m.close()
		url, truth = m.url, &remoteTruth{base: m.url}
		rep.Mock = fmt.Sprintf("child process %d at %s (fixed TTFT %v, ITL %v): the client is measured alone",
			m.cmd.Process.Pid, url, cfg.TTFT, cfg.ITL)
	}
	fmt.Fprintf(cfg.Log, "calibrating against the mock %s\n", rep.Mock)

	mon, err := clientmon.New(
		clientmon.WithFile(filepath.Join(cfg.OutDir, results.ClientFile)),
		clientmon.WithCPUThreshold(cfg.CPUShare),
		clientmon.WithWarnings(orDiscard(cfg.Warnings)),
	)
	if err != nil {
		return nil, err
	}
	defer mon.Stop()

	type ladder struct {
		conc  []int
		rates []float64
	}
	for _, l := range []ladder{{conc: cfg.Concurrency}, {rates: cfg.Rates}} {
		n := max(len(l.conc), len(l.rates))
		for i := 0; i < n && ctx.Err() == nil; i++ {
			var c int
			var r float64
			if l.conc != nil {
				c = l.conc[i]
			} else {
				r = l.rates[i]
			}
			lv, err := runLevel(ctx, cfg, url, truth, mon, c, r)
			if ctx.Err() != nil {
				break // an interrupted level is incomplete: not reported
			}
			if err != nil {
				return nil, err
			}
			judge(cfg, lv)
			rep.Levels = append(rep.Levels, *lv)
			fmt.Fprintln(cfg.Log, lv.line())
			if lv.OverLimit && !cfg.KeepGoing {
				break
			}
		}
	}
	// An interrupted calibration still writes what it measured, marked so.
	rep.Interrupted = ctx.Err() != nil
	rep.Ceiling = ceiling(cfg, rep.Levels)
	rep.Sentence = rep.sentence(cfg)
	if rep.Interrupted {
		rep.Sentence = "interrupted before the ladders ended: " + rep.Sentence
	}
	rep.End = time.Now()
	var errs []error
	if err := mon.Stop(); err != nil {
		errs = append(errs, err)
	}
	if err := results.WriteJSON(filepath.Join(cfg.OutDir, results.CalibrationFile), rep); err != nil {
		errs = append(errs, fmt.Errorf("calibrate: %w", err))
	}
	if rep.Interrupted {
		errs = append(errs, fmt.Errorf("calibrate: interrupted: %w", ctx.Err()))
	}
	return rep, errors.Join(errs...)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// runLevel runs one level (closed loop at c, or open loop at r) and
// compares its records with the truth.
func runLevel(
	ctx context.Context,
	cfg Config,
	url string,
	truth truthSource,
	mon *clientmon.Monitor,
	c int,
	r float64,
) (*Level, error) {
	stream := true
	name := fmt.Sprintf("c%d", c)
	warmup := c // one round, so connections exist before measuring
	if r > 0 {
		name = fmt.Sprintf("r%g", r)
		warmup = max(1, int(r/4)) // a quarter second of arrivals
	}
	plan := harness.Plan{
		Name:    "calibrate " + name,
		Seed:    cfg.Seed,
		Targets: []harness.Target{{Name: "mock", URL: url, API: harness.APIChat, Model: cfg.Model}},
		Dataset: harness.Dataset{
			InputTokens:  harness.Dist{Kind: "fixed", A: float64(cfg.InputTokens)},
			OutputTokens: harness.Dist{Kind: "fixed", A: float64(cfg.OutputTokens)},
		},
		Load: harness.Load{
			Duration: harness.Duration(cfg.StepDuration),
			Warmup:   warmup,
			Arrival:  harness.ArrivalPoisson,
		},
		Stream:    &stream,
		IgnoreEOS: true,
	}
	if c > 0 {
		plan.Load.Concurrency = []int{c}
	} else {
		plan.Load.Rate = []float64{r}
	}
	dir := filepath.Join(cfg.OutDir, name)
	res, err := harness.Run(ctx, plan, dir, harness.WithClientMonitor(mon))
	if err != nil {
		return nil, fmt.Errorf("calibrate: level %s: %w", name, err)
	}
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		return nil, fmt.Errorf("calibrate: level %s: %w", name, err)
	}
	if err := truth.refresh(ctx); err != nil {
		return nil, fmt.Errorf("calibrate: level %s: %w", name, err)
	}
	lv := &Level{Concurrency: c, Rate: r, Dir: dir}
	compare(lv, recs, truth, schedule{ttft: cfg.TTFT, itl: cfg.ITL})
	if len(res.Summary.Steps) > 0 {
		s := res.Summary.Steps[0]
		lv.ScheduleLagMS = LagQuantiles{P50: round(s.ScheduleLag.P50, 3), P99: round(s.ScheduleLag.P99, 3)}
		lv.TokensPerS = round(s.OutputTokensPerS, 1)
		lv.RequestsPerS = round(s.RequestsPerS, 2)
		lv.ClientBound, lv.ClientBoundReason = s.ClientBound, s.ClientBoundReason
	}
	if vs := mon.Verdicts(); len(vs) > 0 {
		v := vs[len(vs)-1]
		lv.ClientCPUPercent = v.CPUOfAvailable
		lv.ClientCores = v.Cores
		lv.SchedLatencyP99MS = v.SchedLatencyP99MS
	}
	return lv, nil
}

// judge marks a level over a limit, naming every limit it broke.
func judge(cfg Config, lv *Level) {
	var why []string
	total := lv.Requests + lv.Failed + lv.Unmatched
	switch {
	case lv.Requests == 0:
		why = append(why, "no request could be compared with the truth")
	case lv.ErrorMS.P99 > ms(cfg.MaxError):
		why = append(why, fmt.Sprintf("measurement error p99 %.3f ms > %.3g ms", lv.ErrorMS.P99, ms(cfg.MaxError)))
	}
	if lv.ScheduleLagMS.P99 > ms(cfg.MaxLag) {
		why = append(why, fmt.Sprintf("schedule lag p99 %.3f ms > %.3g ms", lv.ScheduleLagMS.P99, ms(cfg.MaxLag)))
	}
	if lv.ClientCPUPercent >= 100*cfg.CPUShare {
		why = append(
			why,
			fmt.Sprintf(
				"client CPU %.0f%% of %g cores ≥ %.0f%%",
				lv.ClientCPUPercent,
				lv.ClientCores,
				100*cfg.CPUShare,
			),
		)
	}
	if total > 0 && float64(lv.Failed) > cfg.MaxFailures*float64(total) {
		why = append(why, fmt.Sprintf("%d of %d requests failed", lv.Failed, total))
	}
	lv.OverLimit = len(why) > 0
	lv.Reason = strings.Join(why, "; ")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// ceiling is the best level of each ladder before its first over-limit level.
func ceiling(cfg Config, levels []Level) Ceiling {
	var c Ceiling
	var reasons []string
	concBroke, rateBroke := false, false
	for _, lv := range levels {
		closed := lv.Concurrency > 0
		if lv.OverLimit {
			label := fmt.Sprintf("%d streams", lv.Concurrency)
			if !closed {
				label = fmt.Sprintf("%g req/s", lv.Rate)
			}
			if (closed && !concBroke) || (!closed && !rateBroke) {
				reasons = append(reasons, fmt.Sprintf("at %s: %s", label, lv.Reason))
			}
			if closed {
				concBroke = true
			} else {
				rateBroke = true
			}
			continue
		}
		if (closed && concBroke) || (!closed && rateBroke) {
			continue // past the first break (KeepGoing)
		}
		if closed {
			c.Concurrency = max(c.Concurrency, lv.Concurrency)
		}
		c.RequestsPerS = max(c.RequestsPerS, lv.RequestsPerS)
		c.TokensPerS = max(c.TokensPerS, lv.TokensPerS)
	}
	if !concBroke && len(cfg.Concurrency) > 0 {
		reasons = append(reasons, "no concurrency level broke a limit: the ceiling is above the largest level tried")
	}
	if !rateBroke && len(cfg.Rates) > 0 {
		reasons = append(reasons, "no rate level broke a limit: the ceiling is above the largest rate tried")
	}
	c.Reason = strings.Join(reasons, "; ")
	return c
}

// sentence is the one-line answer.
func (r *Report) sentence(cfg Config) string {
	c := r.Ceiling
	if c.Concurrency == 0 && c.RequestsPerS == 0 {
		return fmt.Sprintf(
			"this machine could not drive even the first level with measurement error ≤ %v (%s)",
			cfg.MaxError,
			c.Reason,
		)
	}
	streams := "streams"
	if c.Concurrency == 1 {
		streams = "stream"
	}
	return fmt.Sprintf(
		"this machine can drive up to %d %s / %.0f req/s (%.0f tokens/s) with measurement error ≤ %v, schedule lag ≤ %v "+
			"and client CPU < %.0f%%",
		c.Concurrency,
		streams,
		c.RequestsPerS,
		c.TokensPerS,
		cfg.MaxError,
		cfg.MaxLag,
		100*cfg.CPUShare,
	)
}

// line is a level's progress line.
func (lv *Level) line() string {
	load := fmt.Sprintf("c=%-5d", lv.Concurrency)
	if lv.Concurrency == 0 {
		load = fmt.Sprintf("r=%-5g", lv.Rate)
	}
	verdict := "ok"
	if lv.OverLimit {
		verdict = "OVER: " + lv.Reason
	}
	return fmt.Sprintf("%s %6d req  client error (%s stamps) p50 %.3f p99 %.3f max %.3f ms  user-stamp p99 %.3f ms  "+
		"server late p99 %.3f ms  lag p99 %.3f ms  cpu %3.0f%%  %8.0f tok/s %7.1f req/s  %s",
		load, lv.Requests, lv.Clock, lv.ErrorMS.P50, lv.ErrorMS.P99, lv.ErrorMS.Max, lv.ErrorUserMS.P99,
		lv.ServerLatenessMS.P99, lv.ScheduleLagMS.P99, lv.ClientCPUPercent, lv.TokensPerS, lv.RequestsPerS, verdict)
}

// WriteTable prints the report as a table with the sentence last.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "mock:", r.Mock)
	fmt.Fprintln(w, "client error: client − mock over TTFT, E2E and every gap, from the kernel's receive stamps "+
		"(clock kernel) or user-space ones; itl: the gaps alone; user stamps: the error from user-space stamps; "+
		"send: the request's path inside the client (in TTFT and E2E); server late: the mock's write start − its schedule")
	fmt.Fprintf(w, "%-8s %8s %-6s %25s %8s %11s %8s %11s %9s %6s %10s %9s  %s\n", "level", "requests", "clock",
		"client error ms p50/p99/max", "itl", "user stamps", "send", "server late", "lag p99", "cpu%", "tok/s", "req/s",
		"verdict")
	fmt.Fprintf(w, "%-8s %8s %-6s %25s %8s %11s %8s %11s\n", "", "", "", "", "p99 ms", "p99 ms", "p99 ms", "p99 ms")
	for _, lv := range r.Levels {
		load := results.LoadLabel(lv.Concurrency, lv.Rate)
		verdict := "ok"
		if lv.OverLimit {
			verdict = "over: " + lv.Reason
		}
		fmt.Fprintf(w, "%-8s %8d %-6s %25s %8.3f %11.3f %8.3f %11.3f %9.3f %6.0f %10.0f %9.1f  %s\n", load, lv.Requests,
			lv.Clock, fmt.Sprintf("%.3f/%.3f/%.3f", lv.ErrorMS.P50, lv.ErrorMS.P99, lv.ErrorMS.Max), lv.ITLErrorMS.P99,
			lv.ErrorUserMS.P99, lv.SendDelayMS.P99, lv.ServerLatenessMS.P99, lv.ScheduleLagMS.P99, lv.ClientCPUPercent,
			lv.TokensPerS, lv.RequestsPerS, verdict)
	}
	fmt.Fprintf(w, "ceiling: %s\n", r.Ceiling.Reason)
	fmt.Fprintln(w, r.Sentence)
}

// schedule is the fixed-mode mock's: token i is due TTFT + i·ITL after
// the request leaves the mock's queue.
type schedule struct{ ttft, itl time.Duration }

// lateness appends each token chunk's write start minus its due time, in ms.
func (s schedule) lateness(t mockllm.Truth, out []float64) []float64 {
	for i, w := range t.TokenNS {
		due := t.DequeuedNS + int64(s.ttft) + int64(i)*int64(s.itl)
		out = append(out, float64(w-due)/1e6)
	}
	return out
}

// errors are one request's client-minus-server differences, in ms, for
// chunk arrival times client (TTFT and E2E signed, then each gap).
func requestErrors(client []int64, sent int64, t mockllm.Truth) (ttft, e2e float64, gaps []float64) {
	ttft = float64((client[0]-sent)-(t.FirstTokenNS-t.ArrivalNS)) / 1e6
	e2e = float64((client[len(client)-1]-sent)-(t.LastTokenNS-t.ArrivalNS)) / 1e6
	gaps = make([]float64, 0, len(client)-1)
	for j := 1; j < len(client); j++ {
		gaps = append(gaps, float64((client[j]-client[j-1])-(t.TokenNS[j]-t.TokenNS[j-1]))/1e6)
	}
	return ttft, e2e, gaps
}

// compare fills the level's error figures from its records and the truth:
// the client's error from kernel stamps where the records have them, the
// same from user-space stamps beside it, and the mock's own lateness.
func compare(lv *Level, recs []results.Record, truth truthSource, sched schedule) {
	var all, allUser, ttft, itl, e2e, late, delay, send []float64
	kernel := 0
	for i := range recs {
		rec := &recs[i]
		if rec.Warmup {
			continue
		}
		if !rec.OK() {
			lv.Failed++
			continue
		}
		t, ok := truth.get(rec.ID)
		user := rec.ChunkTimes()
		if !ok || len(t.TokenNS) != len(user) || len(user) == 0 {
			lv.Unmatched++
			continue
		}
		lv.Requests++
		late = sched.lateness(t, late)
		if rec.WroteNS > rec.SentNS {
			send = append(send, float64(rec.WroteNS-rec.SentNS)/1e6)
		}
		client := user
		if k := rec.KernelChunkTimes(); k != nil {
			client = k
			kernel++
			lv.ChunksCoalesced += int64(rec.ChunksCoalesced)
			for _, d := range rec.ChunkDelaysNS {
				delay = append(delay, float64(d)/1e6)
			}
		}
		dT, dE, gaps := requestErrors(client, rec.SentNS, t)
		if dT < 0 {
			lv.ImpossibleTT++
		}
		ttft, e2e = append(ttft, dT), append(e2e, dE)
		all = append(all, abs(dT), abs(dE))
		for _, g := range gaps {
			itl = append(itl, abs(g))
			all = append(all, abs(g))
		}
		uT, uE, uGaps := requestErrors(user, rec.SentNS, t)
		allUser = append(allUser, abs(uT), abs(uE))
		for _, g := range uGaps {
			allUser = append(allUser, abs(g))
		}
	}
	lv.ErrorMS = quantiles(all)
	lv.ErrorUserMS = quantiles(allUser)
	lv.TTFTErrorMS = quantiles(ttft)
	lv.E2EErrorMS = quantiles(e2e)
	lv.ITLErrorMS = quantiles(itl)
	lv.ServerLatenessMS = quantiles(late)
	lv.ClientDelayMS = quantiles(delay)
	lv.SendDelayMS = quantiles(send)
	switch {
	case lv.Requests == 0:
	case kernel == lv.Requests:
		lv.Clock = "kernel"
	case kernel == 0:
		lv.Clock = "user"
	default:
		lv.Clock = "mixed"
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// quantiles summarizes v (sorted in place) to µs precision.
func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	q := Quantiles{P50: analysis.Quantile(v, 0.5), P99: analysis.Quantile(v, 0.99)}
	q.Max = v[len(v)-1] // quantile sorted v
	return Quantiles{P50: round(q.P50, 3), P99: round(q.P99, 3), Max: round(q.Max, 3)}
}

// truthSource looks up the mock's ground truth by request id.
type truthSource interface {
	refresh(ctx context.Context) error
	get(id string) (mockllm.Truth, bool)
}

// localMock is the mock in this process, on a loopback port.
type localMock struct {
	srv  *mockllm.Server
	http *http.Server
	url  string
	done chan error
}

func startMock(cfg Config) (*localMock, error) {
	p, err := engine.Preset("ideal")
	if err != nil {
		return nil, err
	}
	p.Name = "calibration"
	p.TTFT = cfg.TTFT
	p.ITL = cfg.ITL
	p.Jitter = engine.Jitter{}
	srv, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel(cfg.Model), mockllm.WithSeed(cfg.Seed))
	if err != nil {
		return nil, fmt.Errorf("calibrate: mock: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("calibrate: mock: %w", err)
	}
	m := &localMock{
		srv:  srv,
		http: &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second},
		url:  "http://" + ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() { m.done <- m.http.Serve(ln) }()
	return m, nil
}

func (m *localMock) refresh(context.Context) error { return nil }

func (m *localMock) get(id string) (mockllm.Truth, bool) { return m.srv.Truth(id) }

func (m *localMock) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Drain(ctx)
	_ = m.http.Shutdown(ctx)
	m.srv.Close()
	<-m.done
}

// remoteTruth reads a running mock's truth over HTTP, all of it at once
// (GET /testbed/requests, JSON lines) after each level.
type remoteTruth struct {
	base string
	byID map[string]mockllm.Truth
}

// baseURL strips a trailing /v1 (the harness accepts either form).
func baseURL(u string) string {
	u = strings.TrimRight(u, "/")
	return strings.TrimSuffix(u, "/v1")
}

func (r *remoteTruth) refresh(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/testbed/requests", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ground truth: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf(
			"ground truth: GET %s/testbed/requests: %s: %s (is it a testbed mock?)",
			r.base,
			resp.Status,
			b,
		)
	}
	r.byID = map[string]mockllm.Truth{}
	dec := json.NewDecoder(resp.Body)
	for {
		var t mockllm.Truth
		if err := dec.Decode(&t); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("ground truth: %w", err)
		}
		r.byID[t.ID] = t
	}
}

func (r *remoteTruth) get(id string) (mockllm.Truth, bool) {
	t, ok := r.byID[id]
	return t, ok
}

// round keeps digits decimals: milliseconds to the microsecond.
func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// childMock is the mock in a child process: this executable's `mock`
// subcommand (or Config.MockCommand's), on a free loopback port.
type childMock struct {
	cmd  *exec.Cmd
	url  string
	done chan error // the child's exit
}

// childStartup bounds how long the child may take to say where it listens.
const childStartup = 30 * time.Second

// startChild starts the mock in a child process and waits until it
// listens, which it says on stdout ("... on http://ADDR").
func startChild(ctx context.Context, cfg Config) (*childMock, error) {
	args := []string{"--addr", "127.0.0.1:0", "--profile", "ideal", "--ttft", cfg.TTFT.String(),
		"--itl", cfg.ITL.String(), "--jitter", "none", "--model", cfg.Model, "--seed", strconv.FormatInt(cfg.Seed, 10)}
	build := cfg.MockCommand
	if build == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("calibrate: mock child: %w", err)
		}
		build = func(a []string) *exec.Cmd { return exec.Command(exe, append([]string{"mock"}, a...)...) }
	}
	cmd := build(args)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("calibrate: mock child: %w", err)
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("calibrate: mock child %s: %w", cmd.Path, err)
	}
	m := &childMock{cmd: cmd, done: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := servingURL(sc.Text()); u != "" {
				select {
				case urls <- u:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		m.done <- cmd.Wait() // after the last read of the pipe, as exec requires
	}()
	timer := time.NewTimer(childStartup)
	defer timer.Stop()
	select {
	case m.url = <-urls:
		return m, nil
	case err := <-m.done:
		return nil, fmt.Errorf("calibrate: mock child exited before listening (%v): %s", err, stderr.String())
	case <-timer.C:
		m.close()
		return nil, fmt.Errorf(
			"calibrate: mock child said nowhere it listens within %v: %s",
			childStartup,
			stderr.String(),
		)
	case <-ctx.Done():
		m.close()
		return nil, fmt.Errorf("calibrate: mock child: %w", ctx.Err())
	}
}

// servingURL reads the mock's "serving ... on http://ADDR" line.
func servingURL(line string) string {
	if !strings.HasPrefix(line, "testbed mock: serving") {
		return ""
	}
	i := strings.LastIndex(line, " on ")
	if i < 0 {
		return ""
	}
	u := strings.TrimSpace(line[i+4:])
	if !strings.HasPrefix(u, "http://") {
		return ""
	}
	return u
}

// close interrupts the child, which drains and exits, and kills it if it
// has not within a few seconds.
func (m *childMock) close() {
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		_ = m.cmd.Process.Kill()
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// tailBuffer keeps the last few KiB a child wrote, for an error message.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
