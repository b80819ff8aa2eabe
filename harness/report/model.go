package report

import (
	"fmt"
	"math"
	"sort"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// stepV is one step as the report sees it.
type stepV struct {
	run    *Run
	s      *results.StepSummary
	f      analysis.StepFacts
	target string // display name
	load   float64
}

// targetV gathers what the report says about one target.
type targetV struct {
	name      string
	run       *Run
	steps     []*stepV
	knees     map[string]analysis.Knee // by ladder
	ctx       *analysis.ContextCurve
	cold      *analysis.ColdWarm
	anomalies []analysis.Anomaly
}

// model is every run's steps regrouped by target and scenario.
type model struct {
	runs    []*Run
	targets []*targetV
	byName  map[string]*targetV
}

func newModel(runs []*Run) *model {
	m := &model{runs: runs, byName: map[string]*targetV{}}
	// A target name met in two runs (e.g. before and after an upgrade) is
	// qualified by its run's name so the two stay apart.
	runsOf := map[string]map[*Run]bool{}
	for _, r := range runs {
		for i := range r.Summary.Steps {
			n := r.Summary.Steps[i].Target
			if runsOf[n] == nil {
				runsOf[n] = map[*Run]bool{}
			}
			runsOf[n][r] = true
		}
	}
	display := func(r *Run, t string) string {
		if len(runsOf[t]) > 1 {
			return r.Name() + "/" + t
		}
		return t
	}
	for _, r := range runs {
		facts := map[int]analysis.StepFacts{}
		for _, f := range r.Analysis.Steps {
			facts[f.Step] = f
		}
		for i := range r.Summary.Steps {
			s := &r.Summary.Steps[i]
			name := display(r, s.Target)
			t := m.byName[name]
			if t == nil {
				t = &targetV{name: name, run: r, knees: map[string]analysis.Knee{}}
				m.byName[name] = t
				m.targets = append(m.targets, t)
			}
			t.steps = append(t.steps, &stepV{run: r, s: s, f: facts[s.Step], target: name, load: analysis.LoadOf(s)})
		}
		for _, k := range r.Analysis.Knees {
			if t := m.byName[display(r, k.Target)]; t != nil {
				k.Target = t.name
				t.knees[k.Ladder] = k
			}
		}
		for i := range r.Analysis.LongContext {
			c := r.Analysis.LongContext[i]
			if t := m.byName[display(r, c.Target)]; t != nil {
				c.Target = t.name
				t.ctx = &c
			}
		}
		for i := range r.Analysis.ColdStart {
			c := r.Analysis.ColdStart[i]
			if t := m.byName[display(r, c.Target)]; t != nil {
				c.Target = t.name
				t.cold = &c
			}
		}
		for _, a := range r.Analysis.Anomalies {
			if t := m.byName[display(r, a.Target)]; t != nil {
				a.Target = t.name
				t.anomalies = append(t.anomalies, a)
			}
		}
	}
	return m
}

// scenario returns the target's steps of one scenario, by load then input length.
func (t *targetV) scenario(name string) []*stepV {
	var out []*stepV
	for _, s := range t.steps {
		if s.s.Scenario == name {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].load != out[j].load {
			return out[i].load < out[j].load
		}
		return out[i].f.InputTokens < out[j].f.InputTokens
	})
	return out
}

// scenarios lists the scenarios present, ladders first, then in the order
// the methodology presents them, then any others by first appearance.
func (m *model) scenarios() []string {
	known := []string{harness.ScenarioConcurrency, harness.ScenarioRate, harness.ScenarioLongContext,
		harness.ScenarioColdStart, harness.ScenarioWarm, harness.ScenarioStreaming, harness.ScenarioNonStreaming,
		harness.ScenarioConnReuse, harness.ScenarioConnNew, harness.ScenarioShortOutput, harness.ScenarioLongOutput}
	present := map[string]bool{}
	var extra []string
	for _, t := range m.targets {
		for _, s := range t.steps {
			if !present[s.s.Scenario] {
				present[s.s.Scenario] = true
				if !contains(known, s.s.Scenario) {
					extra = append(extra, s.s.Scenario)
				}
			}
		}
	}
	var out []string
	for _, k := range known {
		if present[k] {
			out = append(out, k)
		}
	}
	return append(out, extra...)
}

func (m *model) has(scenario string) bool {
	return contains(m.scenarios(), scenario)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// stepAt returns the target's step of scenario at load, or nil.
func (t *targetV) stepAt(scenario string, load float64) *stepV {
	for _, s := range t.scenario(scenario) {
		if s.load == load {
			return s
		}
	}
	return nil
}

// interval returns the confidence interval of metric at percentile p, if the
// analysis computed one.
func (s *stepV) interval(metric string, p float64) (analysis.Interval, bool) {
	for _, mc := range s.f.Percentiles {
		if mc.Metric != metric {
			continue
		}
		for _, iv := range mc.Intervals {
			if iv.Percentile == p {
				return iv, true
			}
		}
	}
	return analysis.Interval{}, false
}

// Number formats used in tables and text.
func ms(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// human writes a latency in ms as "850 ms" or "2.31 s".
func human(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return ms(v) + " ms"
}

func rate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return commas(int64(math.Round(v)))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// commas groups thousands: 12345 → "12,345".
func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return neg + s
}

func pct(v float64) string {
	switch {
	case v == 0:
		return "0 %"
	case v < 0.001:
		return "<0.1 %"
	default:
		return fmt.Sprintf("%.1f %%", v*100)
	}
}

// name says which step s is, for lists and the interval table: scenario,
// load, and for long-context steps the input length that tells buckets apart.
func (s *stepV) name() string {
	n := s.s.Label()
	if s.s.Scenario == harness.ScenarioLongContext {
		n += fmt.Sprintf(", %s tokens", commas(int64(s.f.InputTokens)))
	}
	return n
}
