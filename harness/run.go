package harness

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Outcome is what Run returns: the whole run, as its results directory holds
// it. (One request is a results.Record.)
type Outcome struct {
	Dir         string
	Info        results.RunInfo[Plan]
	Summary     results.Summary
	Interrupted bool // the context ended before the plan did
}

// Run executes plan and writes its results directory into outDir:
// requests.jsonl, run.json and summary.json, client.jsonl from the client
// monitor, and server_metrics.jsonl / gpu.jsonl when the plan samples the
// server or the GPUs. When ctx ends (Ctrl-C), Run stops scheduling, gives
// in-flight requests the plan's grace period, records the rest as
// cancelled and still writes every file; Outcome.Interrupted says so.
// A bad plan, a host without NVML for a gpu section, or an unreachable
// target fails the run before any load is sent, and before outDir is made.
func Run(ctx context.Context, plan Plan, outDir string, opts ...RunOption) (*Outcome, error) {
	var o runOptions
	for _, f := range opts {
		f(&o)
	}
	// Defaults are filled into slices the caller still holds: copy them, so
	// one plan can be run by several goroutines at once.
	plan.Targets = slices.Clone(plan.Targets)
	plan.Extra = slices.Clone(plan.Extra)
	plan.SetDefaults()
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	if plan.Shard != nil {
		s := *plan.Shard // the coordinator may assign the index: not in the caller's plan
		plan.Shard = &s
	}
	// Emulated links first: everything after, the preflight included,
	// reaches those targets through them (network.go).
	lk, err := startLinks(&plan)
	if err != nil {
		return nil, err
	}
	defer lk.close()
	// Long-context prompts sized for the server's tokenizer (sizeprompts.go).
	if err := sizeLongContext(ctx, &plan); err != nil {
		return nil, err
	}
	// Receive stamping on for the host before the first connection
	// (stamp_linux.go), so no early read goes unstamped.
	defer holdStamping()()
	t0 := time.Now()
	r, err := newRunner(ctx, &plan, t0)
	if err != nil {
		return nil, err
	}
	defer r.closeIdle()
	nvml, err := openNVML(&plan)
	if err != nil {
		return nil, err
	}
	if err := preflight(ctx, &plan, t0); err != nil {
		return nil, errors.Join(err, closeNVML(nvml))
	}
	if err := r.joinShards(ctx); err != nil {
		return nil, errors.Join(err, closeNVML(nvml))
	}
	outDir = r.shardDir(outDir)
	out, err := createResults(ctx, &plan, outDir, t0, o.version, r.shard)
	if err != nil {
		return nil, errors.Join(err, closeNVML(nvml))
	}
	defer out.close()
	r.runID = out.info.RunID
	r.probes = newRTTProbes(&plan, t0)
	r.probes.all(ctx, -1, probesBefore)
	r.observe = o.observe
	watching, err := watch(&plan, nvml, outDir, t0, &o)
	if err != nil {
		return nil, err
	}
	w := results.NewLineWriter[results.Record](out.records)
	hw := results.NewLineWriter[results.StepHistograms](out.histograms)
	writerDone := make(chan error, 1)
	go func() { writerDone <- r.writeLoop(w, hw, plan.SLO) }()
	r.runSteps(ctx, &o)
	close(r.out)
	err = errors.Join(<-writerDone, watching.stop())

	info := out.info
	info.End = time.Now()
	info.Interrupted = ctx.Err() != nil
	info.Records = w.Lines()
	info.Shard = r.shard
	if r.coord != nil {
		err = errors.Join(err, r.coord.done(ctx))
	}
	info.Network = r.probes.result(lk)
	info.TokenStamps, info.TokenStampNotes = r.stampSummary()
	res := &Outcome{
		Dir:         outDir,
		Info:        info,
		Summary:     results.Summary{Steps: r.summaries},
		Interrupted: info.Interrupted,
	}
	if res.Summary.Steps == nil {
		res.Summary.Steps = []results.StepSummary{}
	}
	errs := []error{err}
	errs = append(errs, results.WriteJSON(filepath.Join(outDir, results.RunFile), info))
	errs = append(errs, results.WriteJSON(filepath.Join(outDir, results.SummaryFile), res.Summary))
	// Close here, not only in the deferred call, so that an error closing
	// the records file reaches the caller; the deferred Close then only
	// covers the early returns.
	errs = append(errs, out.close())
	return res, errors.Join(errs...)
}

// newRunner builds the run's clients, one per target and connection mode,
// and loads the plan's prompt file.
func newRunner(ctx context.Context, plan *Plan, t0 time.Time) (*runner, error) {
	r := &runner{plan: plan, clients: map[string]*client{}, t0: t0, out: make(chan msg, 8192)}
	if plan.Dataset.Prompts != "" {
		prompts, err := LoadPrompts(plan.Dataset.Prompts, plan.Dataset.PromptFormat)
		if err != nil {
			return nil, err
		}
		r.prompts = prompts
	}
	r.shardN = 1
	if plan.Shard != nil {
		r.shardI = plan.Shard.Index
		r.shardN = plan.Shard.Count
	}
	steps := plan.Steps()
	maxConns := 0
	for _, s := range steps {
		maxConns = max(maxConns, s.Concurrency, s.MaxInFlight)
		if s.Rate > 0 && s.MaxInFlight == 0 {
			// In flight = rate × latency: room for latencies up to 10 s.
			maxConns = max(maxConns, 1024, int(s.Rate*10))
		}
	}
	if r.shardN > 1 {
		maxConns = (maxConns + r.shardN - 1) / r.shardN
	}
	for _, s := range steps {
		key := s.Target.Name + "|" + s.Connection
		if r.clients[key] != nil {
			continue
		}
		c, err := newClient(plan, s.Target, s.Connection, t0, maxConns)
		if err != nil {
			r.closeIdle()
			return nil, err
		}
		r.clients[key] = c
	}
	return r, nil
}

func (r *runner) closeIdle() {
	for _, c := range r.clients {
		c.tr.CloseIdleConnections()
	}
}

// preflight checks that every target answers before any load is sent.
func preflight(ctx context.Context, plan *Plan, t0 time.Time) error {
	for _, t := range plan.Targets {
		pc, err := newClient(plan, t, "new", t0, 1)
		if err != nil {
			return err
		}
		if err := pc.preflight(ctx); err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
	}
	return nil
}

// resultsFiles are what Run holds open in the results directory.
type resultsFiles struct {
	records    *os.File
	histograms *os.File
	info       results.RunInfo[Plan]
	closed     bool
}

// close syncs and closes both files once; later calls do nothing.
func (f *resultsFiles) close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	return errors.Join(f.records.Sync(), f.records.Close(), f.histograms.Sync(), f.histograms.Close())
}

// createResults makes outDir, creates requests.jsonl and writes run.json
// as it stands at the start, so a killed run still says what it was.
//
// A shard's run id carries its index, so record ids stay unique when the
// shards' records are merged.
func createResults(
	ctx context.Context,
	plan *Plan,
	outDir string,
	t0 time.Time,
	version string,
	shard *results.ShardInfo,
) (*resultsFiles, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(outDir, results.RecordsFile))
	if err != nil {
		return nil, err
	}
	h, err := os.Create(filepath.Join(outDir, results.HistogramsFile))
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	info := results.RunInfo[Plan]{
		FormatVersion: results.FormatVersion,
		RunID:         newRunID(),
		Version:       cmp.Or(version, "dev"),
		Seed:          plan.Seed,
		Plan:          plan.Redacted(), // run.json is shared: no credentials
		Start:         t0,
		Host:          HostFacts(ctx),
		Shard:         shard,
	}
	if shard != nil {
		info.RunID = fmt.Sprintf("%s-s%d", cmp.Or(shard.Group, info.RunID), shard.Index)
	}
	if err := results.WriteJSON(filepath.Join(outDir, results.RunFile), info); err != nil {
		return nil, errors.Join(err, f.Close(), h.Close())
	}
	return &resultsFiles{records: f, histograms: h, info: info}, nil
}

// runSteps runs the plan's steps in order, reporting each to the step
// monitors, until the plan ends or ctx does.
func (r *runner) runSteps(ctx context.Context, o *runOptions) {
	// hard ends in-flight requests: the grace period after ctx ends.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
			t := time.NewTimer(r.plan.Timeouts.Grace.D())
			defer t.Stop()
			select {
			case <-t.C:
				hardCancel()
			case <-o.stop: // nil without WithStop: never ready
				hardCancel()
			case <-finished:
			}
		case <-finished:
		}
	}()
	steps := r.plan.Steps()
	stopProgress := r.progressLoop(*o, len(steps))
	defer stopProgress()
	for _, st := range steps {
		if ctx.Err() != nil {
			break
		}
		r.syncStep(ctx, st.Index)
		r.startStep(st)
		si := StepInfo{
			Index:       st.Index,
			Target:      st.Target.Name,
			Scenario:    st.Scenario,
			Concurrency: st.Concurrency,
			Rate:        st.Rate,
			Start:       time.Now(),
		}
		for _, m := range o.monitors {
			m.StepStarted(si)
		}
		r.runStep(ctx, hard, st)
		si.End = time.Now()
		reply := make(chan lagReply, 1)
		r.out <- msg{lag: &lagQuery{index: st.Index, reply: reply}}
		lr := <-reply
		si.ScheduleLagP99, si.ClientDelayP99 = lr.lag, lr.delay
		end := stepEnd{index: st.Index}
		for _, m := range o.monitors {
			if bound, reason := m.StepEnded(si); bound {
				end.bound = true
				if end.reason != "" {
					end.reason += "; "
				}
				end.reason += reason
			}
		}
		r.out <- msg{end: &end}
		// The round trip again, between steps, unloaded.
		r.probes.target(ctx, st.Target.Name, st.Index, probesAfter)
	}
}

// startStep resets the progress counters for st.
func (r *runner) startStep(st Step) {
	r.step.Store(int64(st.Index))
	r.label.Store(st.Label())
	r.planned.Store(int64(partOf(&st, r.shardI, r.shardN).count(st.Requests + st.Warmup)))
	if st.Requests == 0 {
		r.planned.Store(0)
	}
	r.stepDur.Store(int64(st.Duration))
	r.sent.Store(0)
	r.done.Store(0)
	r.errs.Store(0)
	r.stepStart.Store(r.since())
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type runner struct {
	plan      *Plan
	clients   map[string]*client
	prompts   []Prompt
	t0        time.Time
	runID     string
	out       chan msg
	observe   func(*results.Record) // WithRecordObserver
	summaries []results.StepSummary
	probes    *rttProbes // the network round trip, measured between steps (rtt.go)

	// shardI of shardN is this run's part of a scaled-out run (1 when
	// alone); shard is what run.json records of it, coord its coordinator.
	shardI, shardN int
	shard          *results.ShardInfo
	coord          *coordClient

	step, planned, sent, done, errs, inflight, stepStart, stepDur atomic.Int64
	label                                                         atomic.Value
}

func (r *runner) since() int64 { return int64(time.Since(r.t0)) }

// progressLoop reports progress every o.every until the returned stop is called.
func (r *runner) progressLoop(o runOptions, steps int) (stop func()) {
	if o.progress == nil || o.every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				label, _ := r.label.Load().(string)
				o.progress(Progress{
					Step: int(r.step.Load()), Steps: steps, Label: label, Sent: r.sent.Load(), Done: r.done.Load(),
					Errors: r.errs.Load(), InFlight: r.inflight.Load(), Elapsed: time.Duration(r.since() - r.stepStart.Load()),
					StepTotal: r.planned.Load(), StepDuration: time.Duration(r.stepDur.Load()),
				})
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
