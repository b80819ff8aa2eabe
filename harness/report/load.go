package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"testbed/harness"
	"testbed/harness/analysis"
)

// Run is one results directory, read back from its files.
type Run struct {
	Dir      string
	Info     harness.RunInfo
	Summary  harness.Summary // rebuilt from the records; client-bound verdicts from summary.json
	Records  []harness.Record
	Analysis analysis.Analysis
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
	recs, err := harness.ReadRecords(filepath.Join(dir, harness.RecordsFile))
	if err != nil {
		if len(recs) == 0 {
			return nil, fmt.Errorf("report: %w", err)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %v; the %d records before it are used", harness.RecordsFile, err, len(recs)))
	}
	r.Records = recs
	switch b, err := os.ReadFile(filepath.Join(dir, harness.RunFile)); {
	case errors.Is(err, fs.ErrNotExist):
		r.Notes = append(r.Notes, harness.RunFile+" is missing: plan, SLOs and environment unknown")
	case err != nil:
		return nil, fmt.Errorf("report: %w", err)
	default:
		if err := json.Unmarshal(b, &r.Info); err != nil {
			return nil, fmt.Errorf("report: %s: %w", filepath.Join(dir, harness.RunFile), err)
		}
	}
	r.Summary = harness.Summarize(recs, harness.WithSLO(r.Info.Plan.SLO))

	var saved harness.Summary
	switch b, err := os.ReadFile(filepath.Join(dir, harness.SummaryFile)); {
	case errors.Is(err, fs.ErrNotExist):
		r.Notes = append(r.Notes, harness.SummaryFile+" is missing: client-bound verdicts unknown")
	case err != nil:
		return nil, fmt.Errorf("report: %w", err)
	default:
		if err := json.Unmarshal(b, &saved); err != nil {
			return nil, fmt.Errorf("report: %s: %w", filepath.Join(dir, harness.SummaryFile), err)
		}
	}
	bound := map[int]harness.StepSummary{}
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
	for _, s := range saved.Steps {
		if !rebuilt[s.Step] { // a step without a single record still belongs in the report
			r.Summary.Steps = append(r.Summary.Steps, s)
		}
	}
	sort.SliceStable(r.Summary.Steps, func(i, j int) bool { return r.Summary.Steps[i].Step < r.Summary.Steps[j].Step })
	if opts.SLO == (harness.SLO{}) {
		opts.SLO = r.Info.Plan.SLO
	}
	r.Analysis = analysis.Analyze(r.Summary.Steps, r.Records, opts)
	return r, nil
}
