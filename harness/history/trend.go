package history

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/llm-testbed/testbed/harness/report"
)

// TrendPoint is one metric of one step of one run.
type TrendPoint struct {
	Run       int // index of the run in the trend, from 0
	RunID     string
	Start     time.Time
	Step      string // the step's label
	Value     float64
	Change    float64 // relative to the same step's previous point; NaN for the first
	Regressed bool    // Compare found a regression against the previous point
	Verdict   string  // Compare's verdict against the previous point; "" for the first
}

// Trend follows one metric over stored runs.
type Trend struct {
	Metric MetricSpec
	Runs   []Entry
	Points []TrendPoint
	Rules  Rules
}

// Trend reads the runs f selects, oldest first, and the metric's value at
// each of their steps that match f's target and scenario. Each point is
// judged against the previous run's point of the same step with Compare
// and rules (on that one metric): a regression is marked. Rates have no
// per-request samples and are shown without verdicts.
func (s *Store) Trend(ctx context.Context, metric string, f Filter, rules Rules) (*Trend, error) {
	spec, err := ParseMetric(metric)
	if err != nil {
		return nil, err
	}
	rules.Metrics = []string{spec.Name}
	if spec.Rate != "" {
		rules.Metrics = []string{"ttft_p50"} // unused: rates are not judged
	}
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	es, err := s.List(ctx, f)
	if err != nil {
		return nil, err
	}
	t := &Trend{Metric: spec, Runs: es, Rules: rules}
	prev := map[string]*Step{}
	prevPoint := map[string]int{}
	for i, e := range es {
		r, err := s.Get(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		for j := range r.Steps {
			st := &r.Steps[j]
			if (f.Target != "" && st.Summary.Target != f.Target) ||
				(f.Scenario != "" && st.Summary.Scenario != f.Scenario) {
				continue
			}
			v, ok := spec.Value(st)
			if !ok {
				continue
			}
			p := TrendPoint{Run: i, RunID: r.ID, Start: r.Start, Step: st.Label(), Value: v, Change: math.NaN()}
			if b := prev[p.Step]; b != nil {
				p.Change = v/t.Points[prevPoint[p.Step]].Value - 1
				if spec.Rate == "" {
					p.Verdict, p.Regressed = judgeStep(b, st, rules)
				}
			}
			prev[p.Step] = st
			prevPoint[p.Step] = len(t.Points)
			t.Points = append(t.Points, p)
		}
	}
	return t, nil
}

// judgeStep compares one step of two runs on the rules' one metric.
func judgeStep(base, cur *Step, rules Rules) (string, bool) {
	c, err := Compare(&Run{ID: "base", Steps: []Step{*base}}, &Run{ID: "new", Steps: []Step{*cur}}, rules)
	if err != nil || len(c.Steps) == 0 || len(c.Steps[0].Changes) == 0 {
		return "", false
	}
	v := c.Steps[0].Changes[0].Verdict
	return v, v == Regressed
}

// WriteTable prints the trend, one line per point.
func (t *Trend) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tstarted (UTC)\tstep\t%s (%s)\tchange\tverdict\n", t.Metric.Name, t.Metric.Unit())
	for _, p := range t.Points {
		ch := "-"
		if !math.IsNaN(p.Change) {
			ch = fmt.Sprintf("%+.1f %%", 100*p.Change)
		}
		v := p.Verdict
		if p.Regressed {
			v = "REGRESSED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%s\n", p.RunID, p.Start.UTC().Format("2006-01-02 15:04:05"), p.Step,
			p.Value, ch, dashIfEmpty(v))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(t.Points) == 0 {
		fmt.Fprintf(w, "no stored step has %s for this selection\n", t.Metric.Name)
	}
	return nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Chart is the trend as a line chart: one line per step, runs along x,
// regressions marked.
func (t *Trend) Chart() report.Chart {
	c := report.Chart{ID: "trend", Title: t.Metric.Name + " over runs", XLabel: "run (oldest → newest)",
		YLabel: t.Metric.Name + " (" + t.Metric.Unit() + ")"}
	series := map[string]int{}
	reg := report.Series{Name: "regression", Points: true, Color: "#D55E00"}
	for _, p := range t.Points {
		i, ok := series[p.Step]
		if !ok {
			i = len(c.Series)
			series[p.Step] = i
			c.Series = append(c.Series, report.Series{Name: p.Step})
		}
		c.Series[i].X = append(c.Series[i].X, float64(p.Run+1))
		c.Series[i].Y = append(c.Series[i].Y, p.Value)
		if p.Regressed {
			reg.X = append(reg.X, float64(p.Run+1))
			reg.Y = append(reg.Y, p.Value)
		}
	}
	if len(reg.X) > 0 {
		c.Series = append(c.Series, reg)
	}
	return c
}

var trendPage = template.Must(template.New("trend").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1000px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}.reg{color:#D55E00;font-weight:bold}</style></head>
<body><h1>{{.Title}}</h1>
<p>{{.Runs}} runs. A point is marked when its step regressed against the same step of the run before
(bootstrap interval at {{.Confidence}} confidence, change past {{.MinEffect}}).</p>
{{.SVG}}
<table><tr><th>run</th><th>started (UTC)</th><th>step</th><th>{{.Metric}}</th><th>change</th><th>verdict</th></tr>
{{range .Rows}}<tr{{if .Regressed}} class="reg"{{end}}><td>{{.RunID}}</td><td>{{.Start}}</td><td>{{.Step}}</td><td>{{.Value}}</td><td>{{.Change}}</td><td>{{.Verdict}}</td></tr>
{{end}}</table></body></html>
`))

// WriteHTML writes a self-contained page: the chart and the table.
func (t *Trend) WriteHTML(w io.Writer) error {
	type row struct {
		RunID, Start, Step, Value, Change, Verdict string
		Regressed                                  bool
	}
	var rows []row
	for _, p := range t.Points {
		ch := "-"
		if !math.IsNaN(p.Change) {
			ch = fmt.Sprintf("%+.1f %%", 100*p.Change)
		}
		v := dashIfEmpty(p.Verdict)
		if p.Regressed {
			v = "REGRESSED"
		}
		rows = append(rows, row{p.RunID, p.Start.UTC().Format("2006-01-02 15:04:05"), p.Step,
			fmt.Sprintf("%.3f %s", p.Value, t.Metric.Unit()), ch, v, p.Regressed})
	}
	svg := ""
	if c := t.Chart(); !c.Empty() {
		svg = c.SVG()
	}
	return trendPage.Execute(w, map[string]any{
		"Title": "testbed trend: " + t.Metric.Name, "Runs": len(t.Runs), "Metric": t.Metric.Name,
		"Confidence": fmt.Sprintf(
			"%g %%",
			100*t.Rules.Confidence,
		), "MinEffect": fmt.Sprintf("%g %%", 100*t.Rules.MinEffect),
		"SVG": template.HTML(svg), "Rows": rows, // the chart's SVG escapes its own text
	})
}
