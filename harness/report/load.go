package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// Run is one results directory, read back from its files.
type Run struct {
	Dir      string
	Info     results.RunInfo[harness.Plan]
	Summary  results.Summary // rebuilt from the records; client-bound verdicts from summary.json
	Records  []results.Record
	Analysis analysis.Analysis
	// Server holds the server-side samples (server_metrics.jsonl, gpu.jsonl)
	// when the run took them.
	Server []results.Sample
	// Notes are problems met while reading (a missing summary.json, a torn
	// last record), shown in the report's limitations.
	Notes []string
}

// Name is how the run is called in a report: the plan's name, else the
// directory's base name.
func (r *Run) Name() string {
	if r.Info.Plan.Name != "" {
		return r.Info.Plan.Name
	}
	return filepath.Base(filepath.Clean(r.Dir))
}

// Load reads a results directory. requests.jsonl is the source of truth:
// the summary is rebuilt from it (with the plan's SLOs), and summary.json
// only contributes what records cannot hold — the client-bound verdicts of
// the self-monitor. The analysis is computed with opts.
func Load(dir string, opts analysis.Options) (*Run, error) {
	r := &Run{Dir: dir}
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("report: %w", err)
	case err != nil:
		// A torn or damaged line loses what follows it, never what precedes.
		r.Notes = append(
			r.Notes,
			fmt.Sprintf("%s: %v; the %d records before it are used", results.RecordsFile, err, len(recs)),
		)
	case len(recs) == 0:
		r.Notes = append(r.Notes, results.RecordsFile+" holds no record: no figure can be shown")
	}
	r.Records = recs
	switch b, err := os.ReadFile(filepath.Join(dir, results.RunFile)); {
	case errors.Is(err, fs.ErrNotExist):
		r.Notes = append(r.Notes, results.RunFile+" is missing: plan, SLOs and environment unknown")
	case err != nil:
		return nil, fmt.Errorf("report: %w", err)
	default:
		if err := json.Unmarshal(b, &r.Info); err != nil {
			r.Info = results.RunInfo[harness.Plan]{}
			r.Notes = append(r.Notes, fmt.Sprintf("%s is damaged (%v): plan, SLOs and environment unknown",
				results.RunFile, err))
		}
	}
	r.Summary = harness.Summarize(recs, harness.WithSLO(r.Info.Plan.SLO))

	var saved results.Summary
	switch b, err := os.ReadFile(filepath.Join(dir, results.SummaryFile)); {
	case errors.Is(err, fs.ErrNotExist):
		r.Notes = append(r.Notes, results.SummaryFile+" is missing: client-bound verdicts unknown")
	case err != nil:
		return nil, fmt.Errorf("report: %w", err)
	default:
		if err := json.Unmarshal(b, &saved); err != nil {
			saved = results.Summary{}
			r.Notes = append(r.Notes, fmt.Sprintf(
				"%s is damaged (%v): figures rebuilt from the records, client-bound verdicts from %s only",
				results.SummaryFile, err, results.ClientFile))
		}
	}
	bound := map[int]results.StepSummary{}
	for _, s := range saved.Steps {
		bound[s.Step] = s
	}
	rebuilt := map[int]bool{}
	for i := range r.Summary.Steps {
		s := &r.Summary.Steps[i]
		rebuilt[s.Step] = true
		if v, ok := bound[s.Step]; ok {
			s.ClientBound, s.ClientBoundReason = v.ClientBound, v.ClientBoundReason
		}
	}
	var bare []string
	for _, s := range saved.Steps {
		if !rebuilt[s.Step] { // a step without a single record still belongs in the report, without figures
			r.Summary.Steps = append(r.Summary.Steps, withoutFigures(s))
			bare = append(bare, fmt.Sprint(s.Step))
		}
	}
	if len(bare) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s lists step(s) %s without a record in %s: their figures are not shown",
			results.SummaryFile, strings.Join(bare, ", "), results.RecordsFile))
	}
	sort.SliceStable(r.Summary.Steps, func(i, j int) bool { return r.Summary.Steps[i].Step < r.Summary.Steps[j].Step })
	if err := r.clientVerdicts(); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	if r.Server, err = results.ReadServerSamples(dir); err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("server samples: %v; %d lines before it are used", err, len(r.Server)))
	}
	if opts.SLO == (harness.SLO{}) {
		opts.SLO = r.Info.Plan.SLO
	}
	r.Analysis = analysis.AnalyzeRun(r.Summary.Steps, r.Records, r.Server, r.windows(), opts)
	analysis.AddDecomposition(&r.Analysis, r.Records, r.Info.Network)
	return r, nil
}

// withoutFigures keeps what identifies a step and drops every figure: no
// record supports them, so they are not shown.
func withoutFigures(s results.StepSummary) results.StepSummary {
	return results.StepSummary{
		Step: s.Step, Target: s.Target, Scenario: s.Scenario, Concurrency: s.Concurrency, Rate: s.Rate,
		API: s.API, Stream: s.Stream, ClientBound: s.ClientBound, ClientBoundReason: s.ClientBoundReason,
		Errors: map[results.ErrorClass]int{},
	}
}

// windows are the steps' measured windows as histograms.jsonl recorded
// them; nil (derive them from the records) when the run has none.
func (r *Run) windows() map[int]analysis.Window {
	h, err := results.ReadLines[results.StepHistograms](filepath.Join(r.Dir, results.HistogramsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		r.Notes = append(
			r.Notes,
			fmt.Sprintf("%s: %v; step windows are taken from the records", results.HistogramsFile, err),
		)
		return nil
	}
	return analysis.WindowsFromHistograms(h)
}

// clientVerdicts restores client-bound flags from the self-monitor's file,
// for steps summary.json did not flag (or when it is missing): a step the
// monitor judged client-bound is reported as such either way.
func (r *Run) clientVerdicts() error {
	_, verdicts, err := results.ReadClient(filepath.Join(r.Dir, results.ClientFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", results.ClientFile, err)
	}
	byStep := map[int]int{}
	for i := range r.Summary.Steps {
		byStep[r.Summary.Steps[i].Step] = i
	}
	for _, v := range verdicts {
		i, ok := byStep[v.StepIndex]
		if !ok || !v.ClientBound {
			continue
		}
		if s := &r.Summary.Steps[i]; !s.ClientBound {
			s.ClientBound, s.ClientBoundReason = true, v.Reason()
		}
	}
	return nil
}
