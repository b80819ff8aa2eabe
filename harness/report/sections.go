package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// group is one section of the dimensions: a scenario, or a pair compared.
type group struct {
	id, title, why string
	scenarios      []string
}

// groups are the sections in the order the methodology presents them.
var groups = []group{
	{"concurrency", "Concurrency ladder (closed loop)", "", []string{harness.ScenarioConcurrency}},
	{"rate", "Rate ladder (open loop)", "", []string{harness.ScenarioRate}},
	{"long-context", "Long context", "", []string{harness.ScenarioLongContext}},
	{
		"cold-start",
		"Cold start",
		"Each cold request followed an idle gap with nothing in flight; the warm reference ran the same way back to back.",
		[]string{harness.ScenarioColdStart, harness.ScenarioWarm},
	},
	{
		"streaming",
		"Streaming vs non-streaming",
		"Non-streaming requests have no first token before the whole answer: compare E2E; their TTFT equals E2E.",
		[]string{harness.ScenarioStreaming, harness.ScenarioNonStreaming},
	},
	{
		"connection",
		"Connection reuse vs new connection per request",
		"A new connection per request pays TCP (and TLS) set-up inside its TTFT.",
		[]string{harness.ScenarioConnReuse, harness.ScenarioConnNew},
	},
	{
		"throughput-split",
		"Request throughput vs token throughput",
		"Short outputs measure how many requests/s the server completes; long outputs how many tokens/s it decodes.",
		[]string{harness.ScenarioShortOutput, harness.ScenarioLongOutput},
	},
}

// dimensions writes, per scenario (or compared pair), the charts and the
// three layers of numbers: latency (TTFT, ITL, E2E), throughput, errors.
func (m *model) dimensions(d *document) {
	all := append([]group(nil), groups...)
	known := map[string]bool{}
	for _, g := range groups {
		for _, sc := range g.scenarios {
			known[sc] = true
		}
	}
	for _, sc := range m.scenarios() {
		if !known[sc] {
			all = append(all, group{id: sc, title: "Scenario " + sc, scenarios: []string{sc}})
		}
	}
	for _, g := range all {
		var present []string
		for _, sc := range g.scenarios {
			if m.has(sc) {
				present = append(present, sc)
			}
		}
		if len(present) == 0 {
			continue
		}
		d.h(2, "scenario-"+g.id, "%s", g.title)
		if g.why != "" {
			d.p("%s", g.why)
		}
		switch present[0] {
		case harness.ScenarioConcurrency, harness.ScenarioRate:
			m.ladderCharts(d, present[0])
		case harness.ScenarioLongContext:
			m.contextChart(d)
		}
		m.latencyTable(d, present)
		m.throughputTable(d, present)
		if present[0] == harness.ScenarioConcurrency || present[0] == harness.ScenarioRate {
			m.resourceTable(d, present)
		}
		switch g.id {
		case "cold-start":
			m.coldTable(d)
		case "connection":
			m.connTable(d)
		}
	}
}

// rowsOf returns every target's steps of the scenarios, target by target.
func (m *model) rowsOf(scs []string) []*stepV {
	var out []*stepV
	for _, t := range m.targets {
		for _, sc := range scs {
			out = append(out, t.scenario(sc)...)
		}
	}
	return out
}

// stepCells are the leading cells naming a row: target, scenario when the
// table mixes two, load, and input length for long-context steps.
func stepCells(s *stepV, scs []string) []string {
	c := []string{s.target}
	if len(scs) > 1 {
		c = append(c, s.s.Scenario)
	}
	c = append(c, results.LoadLabel(s.s.Concurrency, s.s.Rate))
	if contains(scs, harness.ScenarioLongContext) {
		c = append(c, commas(int64(s.f.InputTokens)))
	}
	return c
}

func stepHeader(scs []string) []string {
	h := []string{"target"}
	if len(scs) > 1 {
		h = append(h, "scenario")
	}
	h = append(h, "load")
	if contains(scs, harness.ScenarioLongContext) {
		h = append(h, "input tokens")
	}
	return h
}

func (m *model) latencyTable(d *document, scs []string) {
	rows := m.rowsOf(scs)
	if len(rows) == 0 {
		return
	}
	h := stepHeader(scs)
	lead := len(h)
	if contains(scs, harness.ScenarioLongContext) {
		lead-- // input tokens are a number
	}
	h = append(h, "n", "TTFT P50", "P95", "P99", "ITL P50", "P95", "P99", "E2E P50", "P95", "P99")
	t := table{header: h, right: rightFrom(lead, len(h))}
	for _, s := range rows {
		r := append(stepCells(s, scs), fmt.Sprint(s.s.OK))
		for _, st := range []results.Stats{s.s.TTFT, s.s.ITL, s.s.E2E} {
			r = append(r, pcells(st)...)
		}
		t.rows = append(t.rows, r)
	}
	d.p(
		"Latency (ms) of successful measured requests; TTFT and E2E from the moment the request was sent (from schedule in " +
			"the JSON).",
	)
	d.add(t)
}

func (m *model) throughputTable(d *document, scs []string) {
	rows := m.rowsOf(scs)
	if len(rows) == 0 {
		return
	}
	h := stepHeader(scs)
	right := make([]bool, len(h))
	if contains(scs, harness.ScenarioLongContext) {
		right[len(h)-1] = true
	}
	h = append(h, "ok / requests", "errors", "output tok/s", "input tok/s", "req/s", "goodput req/s", "client")
	t := table{header: h, right: append(right, true, false, true, true, true, true, false)}
	for _, s := range rows {
		client := "ok"
		if s.s.ClientBound {
			client = "**client-bound**"
		}
		t.rows = append(t.rows, append(stepCells(s, scs), fmt.Sprintf("%d / %d", s.s.OK, s.s.Requests),
			errorsCell(s.s), rate(s.s.OutputTokensPerS), rate(s.s.InputTokensPerS), rate(s.s.RequestsPerS),
			rate(s.s.GoodputRequestsPerS), client))
	}
	d.p("Throughput over each step's measured window (warm-up excluded) and errors by class.")
	d.add(t)
}

func errorsCell(s *results.StepSummary) string {
	if analysis.Failed(s) == 0 {
		return "—"
	}
	var parts, extra []string
	for _, c := range results.ErrorClasses {
		if n := s.Errors[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	for c, n := range s.Errors { // classes outside the known list still count
		if !slices.Contains(results.ErrorClasses, c) && n > 0 {
			extra = append(extra, fmt.Sprintf("%s %d", c, n))
		}
	}
	sort.Strings(extra)
	return strings.Join(append(parts, extra...), ", ")
}

func rightFrom(from, n int) []bool {
	r := make([]bool, n)
	for i := from; i < n; i++ {
		r[i] = true
	}
	return r
}

// ladderCharts draws throughput (targets overlaid, knees marked) and the
// three latency layers against load.
func (m *model) ladderCharts(d *document, sc string) {
	xl := "concurrency (in-flight requests)"
	ladder := analysis.LadderConcurrency
	if sc == harness.ScenarioRate {
		xl, ladder = "offered rate (requests/s)", analysis.LadderRate
	}
	thr := Chart{
		ID:     "chart-throughput-" + sc,
		Title:  "Output throughput vs " + strings.Split(xl, " ")[0] + ", all targets",
		XLabel: xl,
		YLabel: "output tokens/s",
	}
	for i, t := range m.targets {
		steps := t.scenario(sc)
		if len(steps) == 0 {
			continue
		}
		se := Series{Name: t.name, Color: palette[i%len(palette)]}
		for _, s := range steps {
			se.X, se.Y = append(se.X, s.load), append(se.Y, s.s.OutputTokensPerS)
		}
		thr.Series = append(thr.Series, se)
		if k, ok := t.knees[ladder]; ok && k.ThroughputKnee != nil {
			thr.Markers = append(
				thr.Markers,
				Marker{X: *k.ThroughputKnee, Label: fmt.Sprintf("knee %s: %s", t.name, num(*k.ThroughputKnee))},
			)
		}
	}
	d.chart(thr)
	for _, metric := range []struct {
		id, name string
		get      func(*results.StepSummary) results.Stats
	}{
		{"ttft", "TTFT", func(s *results.StepSummary) results.Stats { return s.TTFT }},
		{"itl", "ITL", func(s *results.StepSummary) results.Stats { return s.ITL }},
		{"e2e", "E2E latency", func(s *results.StepSummary) results.Stats { return s.E2E }},
	} {
		c := Chart{
			ID:     "chart-" + metric.id + "-" + sc,
			Title:  metric.name + " P50 / P95 / P99 vs " + strings.Split(xl, " ")[0],
			XLabel: xl,
			YLabel: "ms",
		}
		for i, t := range m.targets {
			steps := t.scenario(sc)
			if len(steps) == 0 {
				continue
			}
			col := palette[i%len(palette)]
			for _, q := range []struct {
				p    string
				dash string
				get  func(results.Stats) float64
			}{
				{"P50", "", func(s results.Stats) float64 { return s.P50 }},
				{"P95", "6 4", func(s results.Stats) float64 { return s.P95 }},
				{"P99", "2 3", func(s results.Stats) float64 { return s.P99 }},
			} {
				se := Series{Name: t.name + " " + q.p, Color: col, Dash: q.dash}
				for _, s := range steps {
					st := metric.get(s.s)
					if st.Count == 0 {
						continue
					}
					se.X, se.Y = append(se.X, s.load), append(se.Y, q.get(st))
				}
				c.Series = append(c.Series, se)
			}
		}
		d.chart(c)
	}
}

// contextChart draws TTFT against prompt length, bends marked.
func (m *model) contextChart(d *document) {
	c := Chart{
		ID:     "chart-ttft-context",
		Title:  "TTFT vs input length",
		XLabel: "input tokens",
		YLabel: "TTFT ms",
		LogX:   true,
	}
	for i, t := range m.targets {
		steps := t.scenario(harness.ScenarioLongContext)
		if len(steps) == 0 {
			continue
		}
		sort.SliceStable(steps, func(a, b int) bool { return steps[a].f.InputTokens < steps[b].f.InputTokens })
		col := palette[i%len(palette)]
		p50 := Series{Name: t.name + " P50", Color: col}
		p99 := Series{Name: t.name + " P99", Color: col, Dash: "2 3"}
		for _, s := range steps {
			if s.s.TTFT.Count == 0 {
				continue
			}
			x := float64(s.f.InputTokens)
			p50.X, p50.Y = append(p50.X, x), append(p50.Y, s.s.TTFT.P50)
			p99.X, p99.Y = append(p99.X, x), append(p99.Y, s.s.TTFT.P99)
		}
		c.Series = append(c.Series, p50, p99)
		if t.ctx != nil && t.ctx.Bend != nil {
			c.Markers = append(c.Markers, Marker{X: *t.ctx.Bend, Label: "bend " + t.name})
		}
	}
	d.chart(c)
	var items []string
	for _, t := range m.targets {
		if t.ctx == nil {
			continue
		}
		if t.ctx.PrefillTokensPerS == 0 {
			items = append(
				items,
				fmt.Sprintf(
					"**%s**: TTFT did not grow measurably across the shorter buckets: prefill cost not resolved at this sample size",
					t.name,
				),
			)
			continue
		}
		s := fmt.Sprintf("**%s**: %.2f ms per 1,000 prompt tokens over the shorter buckets (≈ %s prefill tokens/s)",
			t.name, t.ctx.MSPer1K, rate(t.ctx.PrefillTokensPerS))
		if t.ctx.Bend != nil {
			s += fmt.Sprintf(
				"; the curve bends after %s tokens: the longest buckets take up to %.0f %% longer than linear prefill predicts",
				commas(int64(*t.ctx.Bend)),
				t.ctx.Excess*100,
			)
		} else {
			s += fmt.Sprintf("; no bend: every bucket within %.0f %% of linear prefill (largest excess %.0f %%)",
				analysis.DefaultBendExcess*100, t.ctx.Excess*100)
		}
		items = append(items, s)
	}
	if len(items) > 0 {
		d.add(list{items: items})
	}
}

func (m *model) coldTable(d *document) {
	t := table{
		header: []string{
			"target",
			"cold n",
			"cold TTFT P50",
			"cold 95 % CI",
			"cold max",
			"warm n",
			"warm TTFT P50",
			"delta",
			"ratio",
			"significant",
		},
		right: []bool{false, true, true, false, true, true, true, true, true, false},
	}
	for _, tv := range m.targets {
		c := tv.cold
		if c == nil {
			continue
		}
		sig := "no"
		if c.Significant {
			sig = "yes"
		}
		t.rows = append(t.rows, []string{tv.name, fmt.Sprint(c.ColdN), ms(c.ColdP50), ciCell(c.ColdCI), ms(c.ColdMax),
			fmt.Sprint(c.WarmN), ms(c.WarmP50), fmt.Sprintf("%+.1f", c.DeltaMS), fmt.Sprintf("×%.2f", c.Ratio), sig})
	}
	if len(t.rows) > 0 {
		d.p("Cold start vs warm TTFT (ms): each cold request followed an idle gap; warm requests ran back to back.")
		d.add(t)
	}
}

func ciCell(iv analysis.Interval) string {
	if iv.N == 0 {
		return "—"
	}
	s := fmt.Sprintf("[%s, %s]", ms(iv.Lo), ms(iv.Hi))
	if !iv.Adequate {
		s += " open"
	}
	return s
}

// connTable compares connection set-up costs of reuse vs new connections.
func (m *model) connTable(d *document) {
	t := table{
		header: []string{
			"target",
			"mode",
			"requests",
			"new connections",
			"connect P50 ms",
			"TLS P50 ms",
			"TTFT P50 ms",
			"E2E P50 ms",
		},
		right: []bool{false, false, true, true, true, true, true, true},
	}
	for _, tv := range m.targets {
		for _, sc := range []string{harness.ScenarioConnReuse, harness.ScenarioConnNew} {
			for _, s := range tv.scenario(sc) {
				var conn, tlsT []float64
				fresh, n := 0, 0
				for i := range s.run.Records {
					r := &s.run.Records[i]
					if r.Step != s.s.Step || r.Warmup || !r.OK() {
						continue
					}
					n++
					if !r.ConnReused {
						fresh++
					}
					if r.ConnectNS > 0 {
						conn = append(conn, float64(r.ConnectNS)/1e6)
					}
					if r.TLSNS > 0 {
						tlsT = append(tlsT, float64(r.TLSNS)/1e6)
					}
				}
				t.rows = append(
					t.rows,
					[]string{tv.name, sc, fmt.Sprint(n), fmt.Sprint(fresh), ms(median(conn)), ms(median(tlsT)),
						ms(s.s.TTFT.P50), ms(s.s.E2E.P50)},
				)
			}
		}
	}
	if len(t.rows) > 0 {
		d.p("Connection set-up per request: TCP connect and TLS handshake medians over the requests that paid them.")
		d.add(t)
	}
}

// pcells are a metric's P50, P95 and P99 cells; "—" when the metric has no
// sample (TTFT and ITL of non-streaming requests).
func pcells(st results.Stats) []string {
	if st.Count == 0 {
		return []string{"—", "—", "—"}
	}
	return []string{ms(st.P50), ms(st.P95), ms(st.P99)}
}

// median of v; NaN (printed "—") for no values.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return analysis.Percentile(s, 50)
}
