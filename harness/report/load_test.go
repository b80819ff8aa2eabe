package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// copyRun copies the committed golden run into a temporary directory,
// leaving out the named files.
func copyRun(t *testing.T, skip ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{results.RunFile, results.RecordsFile, results.SummaryFile} {
		if contains(skip, f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(goldenRun, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	t.Parallel()
	whole, err := Load(goldenRun, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nRecords, nSteps := len(whole.Records), len(whole.Summary.Steps)
	cases := []struct {
		name  string
		skip  []string
		extra func(t *testing.T, dir string)
		check func(t *testing.T, r *Run, md string)
		err   string
	}{
		// The self-monitor's verdicts flag a step even when summary.json did not.
		{"client verdicts", nil, func(t *testing.T, dir string) {
			line := `{"kind":"step","step":"fast concurrency c=1","step_index":0,"client_bound":true,"reasons":["process CPU 97% of available cores"]}` + "\n"
			if err := os.WriteFile(filepath.Join(dir, results.ClientFile), []byte(line), 0o644); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, r *Run, md string) {
			if s := r.Summary.Steps[0]; !s.ClientBound || !strings.Contains(s.ClientBoundReason, "97%") {
				t.Errorf("step 0: %v %q", s.ClientBound, s.ClientBoundReason)
			}
			if !strings.Contains(md, "**Client-bound steps**") {
				t.Error("limitations do not list the client-bound step")
			}
		}, ""},
		// Without summary.json the numbers are rebuilt and the gap is said.
		{"no summary", []string{results.SummaryFile}, nil, func(t *testing.T, r *Run, md string) {
			if len(r.Summary.Steps) != nSteps || !strings.Contains(md, "summary.json is missing") {
				t.Errorf("%d steps; notes %v", len(r.Summary.Steps), r.Notes)
			}
		}, ""},
		// Without run.json there is no plan or environment, but a report.
		{"no run.json", []string{results.RunFile}, nil, func(t *testing.T, r *Run, md string) {
			if !strings.Contains(md, "run.json is missing") || !strings.Contains(md, "## Conclusions") {
				t.Errorf("notes %v", r.Notes)
			}
		}, ""},
		// Records are the source of truth: without them there is no report.
		{"no records", []string{results.RecordsFile}, nil, nil, results.RecordsFile},
		// A torn last line (a killed run) keeps every record before it, and says so.
		{"torn record", nil, func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, results.RecordsFile), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(`{"id":"x","step":`); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, r *Run, md string) {
			if len(r.Records) != nRecords || !strings.Contains(md, "incomplete") {
				t.Errorf("%d records; notes %v", len(r.Records), r.Notes)
			}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := copyRun(t, c.skip...)
			if c.extra != nil {
				c.extra(t, dir)
			}
			r, err := Load(dir, analysis.Options{})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, r, Markdown([]*Run{r}))
		})
	}
}
