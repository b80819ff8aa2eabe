package harness

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// MergeOptions are the limits `testbed merge` holds the shards to.
type MergeOptions struct {
	// MaxSkew is the most a step's shard starts may spread before the
	// step is flagged (default 50ms).
	MaxSkew time.Duration
	// WindowTolerance is the share of the merged window by which shards'
	// window starts or ends may differ before the step is flagged
	// (default 0.1).
	WindowTolerance float64
	// Version is the tool's version, for run.json.
	Version string
}

func (o MergeOptions) withDefaults() MergeOptions {
	if o.MaxSkew <= 0 {
		o.MaxSkew = 50 * time.Millisecond
	}
	if o.WindowTolerance <= 0 {
		o.WindowTolerance = 0.1
	}
	return o
}

// shardRun is one shard's results directory, read back.
type shardRun struct {
	dir     string
	info    results.RunInfo[Plan]
	summary results.Summary
	hists   []results.StepHistograms
	records []results.Record
	shift   int64 // ns from the merged run's start to this shard's
}

// Merge joins the results directories of the shards of one scaled-out run
// into outDir, as one process sending the same requests would have
// written it: records on one clock (each shard's shifted by its start and
// clock offset) and concatenated; each step's histograms merged exactly,
// its counts summed and its throughput taken over the union of the shards'
// windows; client-bound verdicts and errors kept with the shard that saw
// them. Steps whose shards started further apart than MaxSkew, or whose
// windows disagree, are flagged in run.json's merge section and in the
// step's warnings. analysis.json and the report are left to the caller
// (`testbed merge` writes them as `testbed report` does).
func Merge(dirs []string, outDir string, opts MergeOptions) (*Outcome, error) {
	opts = opts.withDefaults()
	shards, err := loadShards(dirs)
	if err != nil {
		return nil, err
	}
	t0 := alignShards(shards)
	info, err := mergedInfo(shards, t0, opts)
	if err != nil {
		return nil, err
	}
	recs, err := mergeRecords(shards)
	if err != nil {
		return nil, err
	}
	hists, sum := mergeSteps(shards, info.Plan.SLO, info.Merge, opts)
	info.Records = int64(len(recs))
	if err := writeMerged(outDir, shards, &info, recs, hists, sum); err != nil {
		return nil, err
	}
	return &Outcome{Dir: outDir, Info: info, Summary: sum, Interrupted: info.Interrupted}, nil
}

// loadShards reads every directory and checks that they are the shards of
// one run: the same plan, each index of 0..N-1 exactly once.
func loadShards(dirs []string) ([]*shardRun, error) {
	if len(dirs) == 0 {
		return nil, errors.New("merge: no shard directories")
	}
	shards := make([]*shardRun, 0, len(dirs))
	for _, d := range dirs {
		s, err := loadShard(d)
		if err != nil {
			return nil, err
		}
		shards = append(shards, s)
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i].info.Shard.Index < shards[j].info.Shard.Index })
	n := shards[0].info.Shard.Count
	if len(shards) != n {
		return nil, fmt.Errorf("merge: %d directories for a run of %d shards", len(shards), n)
	}
	want, err := planKey(shards[0].info.Plan)
	if err != nil {
		return nil, err
	}
	for i, s := range shards {
		sh := s.info.Shard
		if sh.Count != n || sh.Index != i {
			return nil, fmt.Errorf("merge: %s is shard %d/%d; want each of 0..%d once", s.dir, sh.Index, sh.Count, n-1)
		}
		if sh.Group != shards[0].info.Shard.Group {
			return nil, fmt.Errorf("merge: %s belongs to group %q, %s to %q: not one run",
				s.dir, sh.Group, shards[0].dir, shards[0].info.Shard.Group)
		}
		got, err := planKey(s.info.Plan)
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("merge: %s ran a different plan from %s", s.dir, shards[0].dir)
		}
	}
	return shards, nil
}

// planKey is the plan without its shard section, for comparison.
func planKey(p Plan) (string, error) {
	p.Shard = nil
	b, err := json.Marshal(p)
	return string(b), err
}

func loadShard(dir string) (*shardRun, error) {
	s := &shardRun{dir: dir}
	if err := results.ReadJSON(filepath.Join(dir, results.RunFile), &s.info); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if s.info.Shard == nil {
		return nil, fmt.Errorf("merge: %s is not a shard (run.json has no shard section; run it with --shard I/N)", dir)
	}
	if err := results.ReadJSON(filepath.Join(dir, results.SummaryFile), &s.summary); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	var err error
	if s.hists, err = results.ReadLines[results.StepHistograms](filepath.Join(dir, results.HistogramsFile)); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if s.records, err = results.ReadRecords(filepath.Join(dir, results.RecordsFile)); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	return s, nil
}

// alignShards puts every shard on one clock: the coordinator's (each
// shard's start corrected by its measured offset), from the earliest
// shard's start. It returns that start.
func alignShards(shards []*shardRun) time.Time {
	starts := make([]time.Time, len(shards))
	for i, s := range shards {
		starts[i] = s.info.Start.Add(time.Duration(s.info.Shard.ClockOffsetNS))
	}
	t0 := slices.MinFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i, s := range shards {
		s.shift = int64(starts[i].Sub(t0))
	}
	return t0
}

// mergedInfo is the merged run.json: the plan without its shard section,
// every shard's record, and the start spread of each step.
func mergedInfo(shards []*shardRun, t0 time.Time, opts MergeOptions) (results.RunInfo[Plan], error) {
	first := shards[0].info
	info := results.RunInfo[Plan]{
		FormatVersion: results.FormatVersion,
		RunID:         cmp.Or(first.Shard.Group, strings.TrimSuffix(first.RunID, "-s0")) + "-merged",
		Version:       cmp.Or(opts.Version, "dev"),
		Seed:          first.Seed,
		Plan:          first.Plan,
		Start:         t0,
		Host:          first.Host,
		Merge:         &results.MergeInfo{MaxSkewNS: int64(opts.MaxSkew)},
		Network:       first.Network, // the network of shard 0's machine; each shard's own is in its directory
	}
	info.Plan.Shard = nil
	for _, s := range shards {
		sh := *s.info.Shard
		sh.RunID = s.info.RunID
		sh.Host = cmp.Or(sh.Host, s.info.Host.Hostname)
		info.Shards = append(info.Shards, sh)
		info.Interrupted = info.Interrupted || s.info.Interrupted
		end := s.info.End.Add(time.Duration(sh.ClockOffsetNS))
		if end.After(info.End) {
			info.End = end
		}
	}
	return info, nil
}

// mergeRecords shifts every shard's records onto the merged clock and
// orders them by completion, as one process writes them; ids must be
// unique across shards.
func mergeRecords(shards []*shardRun) ([]results.Record, error) {
	var out []results.Record
	seen := map[string]string{}
	for _, s := range shards {
		for i := range s.records {
			r := s.records[i]
			if d, dup := seen[r.ID]; dup {
				return nil, fmt.Errorf("merge: request id %q is in %s and %s", r.ID, d, s.dir)
			}
			seen[r.ID] = s.dir
			r.Shift(s.shift)
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].DoneNS < out[j].DoneNS })
	return out, nil
}

// mergeSteps merges each step's histograms and counts across shards and
// judges the shards' agreement on it.
func mergeSteps(shards []*shardRun, slo SLO, mi *results.MergeInfo,
	opts MergeOptions) ([]results.StepHistograms, results.Summary) {
	var hists []results.StepHistograms
	sum := results.Summary{Steps: []results.StepSummary{}}
	for _, st := range stepIndices(shards) {
		a, ms := mergeStep(shards, st, slo, opts)
		mi.Steps = append(mi.Steps, ms)
		s := a.summary()
		carryVerdicts(shards, st, &s)
		s.Warnings = append(s.Warnings, ms.Problems...)
		sum.Steps = append(sum.Steps, s)
		if a.seen {
			hists = append(hists, a.histograms())
		}
	}
	return hists, sum
}

// stepIndices are the steps any shard summarized, in order.
func stepIndices(shards []*shardRun) []int {
	var idx []int
	for _, s := range shards {
		for _, st := range s.summary.Steps {
			if !slices.Contains(idx, st.Step) {
				idx = append(idx, st.Step)
			}
		}
	}
	slices.Sort(idx)
	return idx
}

// mergeStep builds the step's aggregate from the shards' histograms and
// summary counts: exactly the aggregate one process would have built.
func mergeStep(shards []*shardRun, step int, slo SLO, opts MergeOptions) (*stepAgg, results.MergeStep) {
	a := newStepAgg(slo)
	ms := results.MergeStep{Step: step}
	var starts, wStarts, wEnds []int64
	for _, s := range shards {
		if ss, ok := shardStep(s, step); ok {
			starts = append(starts, ss.Start.UnixNano())
			if ss.Unsynced != "" {
				ms.Problems = append(ms.Problems, fmt.Sprintf("shard %d started unsynchronised (%s)",
					s.info.Shard.Index, ss.Unsynced))
			}
		}
		sm, ok := stepSummary(s, step)
		if !ok {
			continue
		}
		addCounts(a, sm)
		h, ok := stepHist(s, step)
		if !ok || !a.addHistograms(h, s.shift) {
			continue
		}
		wStarts = append(wStarts, h.WindowStartNS+s.shift)
		wEnds = append(wEnds, h.WindowEndNS+s.shift)
	}
	ms.StartSpreadNS = spread(starts)
	ms.WindowStartSpreadNS = spread(wStarts)
	ms.WindowEndSpreadNS = spread(wEnds)
	judge(&ms, a.end-a.start, windowSlack(a, len(shards)), opts)
	return a, ms
}

// windowSlack is how far shards' windows differ even when all is well: a
// shard's first measured request waits for its own warm-up (closed loop)
// or its own next arrival (open loop, n shards taking turns), and its last
// completes after its own last send: up to one E2E plus n arrivals.
func windowSlack(a *stepAgg, n int) int64 {
	slack := int64(a.e2e.Quantile(99) * 1e6)
	if a.s.Rate > 0 {
		slack += int64(float64(n) / a.s.Rate * 1e9)
	}
	return slack
}

// judge words the limits the step's shards exceeded.
func judge(ms *results.MergeStep, window, slack int64, opts MergeOptions) {
	if ms.StartSpreadNS > int64(opts.MaxSkew) {
		ms.Problems = append(ms.Problems, fmt.Sprintf("shards started %.1f ms apart (limit %.1f ms)",
			float64(ms.StartSpreadNS)/1e6, float64(opts.MaxSkew)/1e6))
	}
	tol := int64(opts.WindowTolerance*float64(window)) + slack
	if ms.WindowStartSpreadNS > tol || ms.WindowEndSpreadNS > tol {
		ms.Problems = append(ms.Problems, fmt.Sprintf(
			"shards' windows disagree: starts %.1f ms and ends %.1f ms apart, more than %.0f%% of the %.1f ms window "+
				"plus %.1f ms for the last request's drain",
			float64(ms.WindowStartSpreadNS)/1e6, float64(ms.WindowEndSpreadNS)/1e6,
			opts.WindowTolerance*100, float64(window)/1e6, float64(slack)/1e6))
	}
}

func spread(v []int64) int64 {
	if len(v) < 2 {
		return 0
	}
	return slices.Max(v) - slices.Min(v)
}

func shardStep(s *shardRun, step int) (results.ShardStep, bool) {
	for _, ss := range s.info.Shard.Steps {
		if ss.Step == step {
			return ss, true
		}
	}
	return results.ShardStep{}, false
}

func stepSummary(s *shardRun, step int) (*results.StepSummary, bool) {
	for i := range s.summary.Steps {
		if s.summary.Steps[i].Step == step {
			return &s.summary.Steps[i], true
		}
	}
	return nil, false
}

func stepHist(s *shardRun, step int) (*results.StepHistograms, bool) {
	for i := range s.hists {
		if s.hists[i].Step == step {
			return &s.hists[i], true
		}
	}
	return nil, false
}

// addCounts adds a shard's step counts to a. Goodput is stored as a rate;
// the count is recovered exactly (a count over a window, times the window,
// rounds back to the count).
func addCounts(a *stepAgg, sm *results.StepSummary) {
	if !a.seen {
		a.seen = true
		a.s.Step = sm.Step
		a.s.Target = sm.Target
		a.s.Scenario = sm.Scenario
		a.s.Concurrency = sm.Concurrency
		a.s.Rate = sm.Rate
		a.s.API = sm.API
		a.s.Stream = sm.Stream
	}
	a.s.Requests += sm.Requests
	a.s.OK += sm.OK
	a.s.InputTokens += sm.InputTokens
	a.s.OutputTokens += sm.OutputTokens
	a.s.UsageDiscrepancies += sm.UsageDiscrepancies
	for c, n := range sm.Errors {
		a.s.Errors[c] += n
	}
	a.good += int(math.Round(sm.GoodputRequestsPerS * sm.WindowS))
	if w := sm.WarmupSummary; w != nil {
		a.warm.Requests += w.Requests
		a.warm.OK += w.OK
		for c, n := range w.Errors {
			a.warm.Errors[c] += n
		}
	}
}

// addHistograms merges a shard's step histograms into a, its window
// shifted onto the merged clock; false when the shard measured nothing.
func (a *stepAgg) addHistograms(h *results.StepHistograms, shift int64) bool {
	for name, m := range a.metrics() {
		m.Merge(h.Metrics[name])
	}
	for name, m := range a.warmupMetrics() {
		m.Merge(h.Warmup[name])
	}
	if h.WindowStartNS == 0 && h.WindowEndNS == 0 {
		return false
	}
	start := h.WindowStartNS + shift
	if !a.measured || start < a.start {
		a.start = start
	}
	a.measured = true
	a.end = max(a.end, h.WindowEndNS+shift)
	return true
}

// carryVerdicts marks the merged step client-bound when any shard's was,
// naming the shard.
func carryVerdicts(shards []*shardRun, step int, s *results.StepSummary) {
	var reasons []string
	for _, sh := range shards {
		sm, ok := stepSummary(sh, step)
		if !ok || !sm.ClientBound {
			continue
		}
		s.ClientBound = true
		reasons = append(reasons, fmt.Sprintf("shard %d/%d: %s", sh.info.Shard.Index, sh.info.Shard.Count,
			sm.ClientBoundReason))
	}
	s.ClientBoundReason = strings.Join(reasons, "; ")
}

// writeMerged writes the merged directory: requests, histograms, summary,
// run.json, and the first sampling shard's server-side samples.
func writeMerged(dir string, shards []*shardRun, info *results.RunInfo[Plan], recs []results.Record,
	hists []results.StepHistograms, sum results.Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	if err := writeLinesFile(filepath.Join(dir, results.RecordsFile), recs); err != nil {
		return err
	}
	if err := writeLinesFile(filepath.Join(dir, results.HistogramsFile), hists); err != nil {
		return err
	}
	if err := copySamples(dir, shards); err != nil {
		return err
	}
	return errors.Join(results.WriteJSON(filepath.Join(dir, results.SummaryFile), sum),
		results.WriteJSON(filepath.Join(dir, results.RunFile), info))
}

func writeLinesFile[T any](path string, v []T) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	w := results.NewLineWriter[T](f)
	for i := range v {
		if err := w.Write(&v[i]); err != nil {
			return errors.Join(fmt.Errorf("merge: %s: %w", path, err), f.Close())
		}
	}
	return errors.Join(w.Flush(), f.Sync(), f.Close())
}

// copySamples keeps the server-side view of the lowest shard that sampled
// (the server is one; several shards scraping it would only repeat it),
// shifted onto the merged clock.
func copySamples(dir string, shards []*shardRun) error {
	for _, name := range []string{results.ServerMetricsFile, results.GPUFile} {
		for _, s := range shards {
			samples, err := results.ReadSamples(filepath.Join(s.dir, name))
			if errors.Is(err, os.ErrNotExist) || (err == nil && len(samples) == 0) {
				continue
			}
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			for i := range samples {
				samples[i].Offset += s.shift
			}
			if err := writeLinesFile(filepath.Join(dir, name), samples); err != nil {
				return err
			}
			break
		}
	}
	return nil
}
