package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// Run statuses.
const (
	StatusComplete    = "complete"    // the plan ran to its end
	StatusInterrupted = "interrupted" // stopped early (Ctrl-C); what ran is kept
	StatusFailed      = "failed"      // the run returned an error; Run.Error says which
	StatusIncomplete  = "incomplete"  // the directory of a run that never finished (killed)
)

// Run is one stored run.
type Run struct {
	ID          string
	Kind        string // run, bench, calibrate, demo, import
	Name        string // the plan's name
	Status      string
	Error       string
	Start, End  time.Time
	StoredAt    time.Time
	ToolVersion string
	Fingerprint Fingerprint
	Plan        json.RawMessage // the resolved plan, as in run.json
	Env         json.RawMessage // run.json without the plan: host, seed, versions
	Knees       []analysis.Knee
	Steps       []Step
	SourceDir   string
	Records     int64
}

// Step is one stored step: its summary and its lossless histograms.
type Step struct {
	Summary    results.StepSummary
	Histograms results.StepHistograms
}

// Label names the step for people and for matching across runs:
// "target scenario load", e.g. "mock concurrency c=4".
func (s *Step) Label() string {
	return s.Summary.Target + " " + s.Summary.Label()
}

// Fingerprint is what makes two runs comparable: the same targets, model,
// scenarios, loads and token distributions, on the same server and GPU.
// Hash digests every field; runs with equal hashes ran the same plan on
// the same setup. URLs and seeds are left out: a mock's port changes
// every run, and a seed is part of the plan, not of the system measured.
type Fingerprint struct {
	Hash         string            `json:"hash"`
	Targets      []string          `json:"targets"` // "name model api"
	Scenarios    []string          `json:"scenarios"`
	Loads        []string          `json:"loads"` // step labels, e.g. "mock concurrency c=4"
	InputTokens  []string          `json:"input_tokens"`
	OutputTokens []string          `json:"output_tokens"`
	Options      string            `json:"options"`               // stream, ignore_eos, connection, http
	GPUs         []string          `json:"gpus,omitempty"`        // GPU models seen by NVML
	ServerInfo   []string          `json:"server_info,omitempty"` // *_info series scraped from the server
	Labels       map[string]string `json:"labels,omitempty"`      // given by the user: image, driver, server args
}

// NewFingerprint computes the fingerprint of plan on the setup described
// by gpus, serverInfo and labels.
func NewFingerprint(plan harness.Plan, gpus, serverInfo []string, labels map[string]string) Fingerprint {
	f := Fingerprint{GPUs: uniq(gpus), ServerInfo: uniq(serverInfo), Labels: labels}
	for _, t := range plan.Targets {
		f.Targets = append(f.Targets, strings.Join([]string{t.Name, t.Model, t.API}, " "))
	}
	for _, st := range plan.Steps() {
		f.Scenarios = append(f.Scenarios, st.Scenario)
		f.Loads = append(f.Loads, st.Target.Name+" "+results.StepLabel(st.Scenario, st.Concurrency, st.Rate))
		f.InputTokens = append(f.InputTokens, st.InputTokens.String())
		f.OutputTokens = append(f.OutputTokens, st.OutputTokens.String())
	}
	f.Scenarios = uniq(f.Scenarios)
	f.InputTokens = uniq(f.InputTokens)
	f.OutputTokens = uniq(f.OutputTokens)
	stream := plan.Stream == nil || *plan.Stream
	f.Options = fmt.Sprintf("stream=%t ignore_eos=%t connection=%s http=%s prompts=%s",
		stream, plan.IgnoreEOS, plan.Connection, plan.HTTP, filepath.Base(plan.Dataset.Prompts))
	b, _ := json.Marshal(f) // cannot fail: strings and maps of strings
	sum := sha256.Sum256(b)
	f.Hash = hex.EncodeToString(sum[:8])
	return f
}

func uniq(v []string) []string {
	out := slices.Clone(v)
	sort.Strings(out)
	return slices.Compact(out)
}

// Target is the run's first target name, or "" (for listings).
func (r *Run) Target() string {
	if len(r.Steps) > 0 {
		return r.Steps[0].Summary.Target
	}
	return ""
}

// FromDir reads a results directory into a Run of the given kind. The
// directory of a killed run (run.json without an end, no summary.json)
// reads as StatusIncomplete with the steps its histograms.jsonl holds;
// labels join the fingerprint.
func FromDir(dir, kind string, labels map[string]string) (*Run, error) {
	var info results.RunInfo[harness.Plan]
	if err := results.ReadJSON(filepath.Join(dir, results.RunFile), &info); err != nil {
		return nil, fmt.Errorf("%s: not a results directory: %w", dir, err)
	}
	if info.RunID == "" {
		return nil, fmt.Errorf("%s: %s has no run_id", dir, results.RunFile)
	}
	r := &Run{ID: info.RunID, Kind: kind, Name: info.Plan.Name, Start: info.Start, End: info.End,
		ToolVersion: info.Version, Records: info.Records, SourceDir: dir}
	if abs, err := filepath.Abs(dir); err == nil {
		r.SourceDir = abs
	}
	var err error
	if r.Plan, r.Env, err = splitInfo(info); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var sum results.Summary
	sumErr := results.ReadJSON(filepath.Join(dir, results.SummaryFile), &sum)
	if sumErr != nil && !errors.Is(sumErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, sumErr)
	}
	r.Status = status(info, sumErr == nil)
	hists, err := results.ReadLines[results.StepHistograms](filepath.Join(dir, results.HistogramsFile))
	if err != nil && !errors.Is(err, results.ErrTornLine) && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	r.Steps = joinSteps(sum.Steps, hists)
	r.Knees = knees(dir, sum.Steps)
	gpus, server := setup(dir)
	r.Fingerprint = NewFingerprint(info.Plan, gpus, server, labels)
	return r, nil
}

func status(info results.RunInfo[harness.Plan], summarized bool) string {
	switch {
	case info.End.IsZero() || !summarized:
		return StatusIncomplete
	case info.Interrupted:
		return StatusInterrupted
	}
	return StatusComplete
}

// splitInfo separates run.json's plan from the rest of it.
func splitInfo(info results.RunInfo[harness.Plan]) (plan, env json.RawMessage, err error) {
	plan, err = json.Marshal(info.Plan)
	if err != nil {
		return nil, nil, err
	}
	rest := results.RunInfo[*struct{}]{FormatVersion: info.FormatVersion, RunID: info.RunID, Version: info.Version,
		Seed: info.Seed, Start: info.Start, End: info.End, Interrupted: info.Interrupted, Records: info.Records,
		Host: info.Host}
	env, err = json.Marshal(rest)
	return plan, env, err
}

// joinSteps pairs each summary step with its histograms line. A killed
// run has no summary: its steps come from the histograms alone, with the
// summary rebuilt from them.
func joinSteps(sums []results.StepSummary, hists []results.StepHistograms) []Step {
	byStep := map[int]results.StepHistograms{}
	for _, h := range hists {
		byStep[h.Step] = h
	}
	var out []Step
	for _, s := range sums {
		h, ok := byStep[s.Step]
		if !ok {
			h = results.StepHistograms{Step: s.Step, Target: s.Target, Scenario: s.Scenario,
				Concurrency: s.Concurrency, Rate: s.Rate, Metrics: map[string]*results.Metric{}}
		}
		delete(byStep, s.Step)
		out = append(out, Step{Summary: s, Histograms: h})
	}
	for _, h := range hists {
		if _, left := byStep[h.Step]; !left {
			continue
		}
		s := results.StepSummary{Step: h.Step, Target: h.Target, Scenario: h.Scenario, Concurrency: h.Concurrency,
			Rate: h.Rate, Warnings: []string{"no summary: the run did not finish"}}
		if m := h.Metrics["e2e_ms"]; m != nil {
			s.OK = int(m.Count())
			s.E2E = m.Stats()
		}
		if m := h.Metrics["ttft_ms"]; m != nil {
			s.TTFT = m.Stats()
		}
		out = append(out, Step{Summary: s, Histograms: h})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Summary.Step < out[j].Summary.Step })
	return out
}

// knees are analysis.json's knee verdicts when `testbed report` wrote
// one, else computed from the summary (knees need no per-request data).
func knees(dir string, steps []results.StepSummary) []analysis.Knee {
	var a analysis.Analysis
	if err := results.ReadJSON(filepath.Join(dir, results.AnalysisFile), &a); err == nil && a.Knees != nil {
		return a.Knees
	}
	if len(steps) == 0 {
		return []analysis.Knee{}
	}
	return analysis.Analyze(steps, nil, analysis.Options{}).Knees
}

// setup reads what the samplers saw of the system under test: the GPU
// models (gpu.jsonl) and the server's *_info series (server_metrics.jsonl),
// which vLLM and TGI use for their version and configuration.
func setup(dir string) (gpus, server []string) {
	samples, _ := results.ReadServerSamples(dir) // absent files: nothing known
	for i := range samples {
		s := &samples[i]
		for _, d := range s.Devices {
			if d.Name != "" {
				gpus = append(gpus, d.Name)
			}
		}
		for k := range s.Metrics {
			if name, _, _ := strings.Cut(k, "{"); strings.HasSuffix(name, "_info") {
				server = append(server, k)
			}
		}
		if len(gpus) > 0 || len(server) > 0 {
			break // the first reading with figures says it
		}
	}
	return gpus, server
}
