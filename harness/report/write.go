package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
)

// build assembles the whole report, conclusions first.
func build(runs []*Run) *document {
	m := newModel(runs)
	d := &document{}
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name()
	}
	d.h(1, "top", "Inference benchmark report: %s", strings.Join(names, ", "))
	m.conclusions(d)
	m.dimensions(d)
	m.network(d) // network.go
	m.distributions(d)
	m.timeline(d)
	m.anomalies(d)
	m.limitations(d)
	m.environment(d)
	return d
}

// Markdown renders runs as report.md's content.
func Markdown(runs []*Run) string { return build(runs).markdown() }

// HTML renders runs as report.html's content: one self-contained page.
func HTML(runs []*Run) string {
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name()
	}
	return build(runs).html("testbed report: " + strings.Join(names, ", "))
}

// Write renders runs into outDir as report.md and report.html.
func Write(outDir string, runs []*Run) error {
	if len(runs) == 0 {
		return fmt.Errorf("report: no run to report")
	}
	d := build(runs)
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name()
	}
	if err := os.WriteFile(filepath.Join(outDir, results.ReportMarkdown), []byte(d.markdown()), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(outDir, results.ReportHTML), []byte(d.html("testbed report: "+strings.Join(names, ", "))), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// WriteCharts writes every chart of the report as a standalone SVG file,
// DIR/<chart id>.svg, for embedding elsewhere or converting to images
// (e.g. rsvg-convert -z 1.5 -o chart.png chart.svg). It returns the paths.
func WriteCharts(dir string, runs []*Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var paths []string
	for _, b := range build(runs).blocks {
		var id, body string
		switch c := b.(type) {
		case chartBlock:
			id, body = c.c.ID, c.c.SVG()
		case stackBlock: // network.go
			id, body = c.c.ID, c.c.SVG()
		default:
			continue
		}
		p := filepath.Join(dir, id+".svg")
		svg := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + body + "\n"
		if err := os.WriteFile(p, []byte(svg), 0o644); err != nil {
			return paths, fmt.Errorf("report: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
