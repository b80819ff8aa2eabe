package report

import (
	"fmt"
	"sort"

	"github.com/llm-testbed/testbed/harness"
)

// distributions draws latency CDFs: per target, TTFT and E2E at each step
// of its main ladder (at most eight steps, spread over the ladder).
func (m *model) distributions(d *document) {
	d.h(2, "distributions", "Latency distributions")
	d.p(
		"Cumulative distributions of successful measured requests: a curve further left is faster; a long flat tail is the " +
			"P99 story.",
	)
	drawn := false
	for ti, t := range m.targets {
		sc := harness.ScenarioConcurrency
		steps := t.scenario(sc)
		if len(steps) == 0 {
			sc = harness.ScenarioRate
			steps = t.scenario(sc)
		}
		if len(steps) == 0 {
			if s := t.chatStep(); s != nil {
				steps = []*stepV{s}
			}
		}
		steps = spread(steps, 8)
		for _, metric := range []string{"TTFT", "E2E"} {
			c := Chart{ID: fmt.Sprintf("chart-cdf-%s-%d", metric, ti), Title: fmt.Sprintf("%s CDF, %s", metric, t.name),
				XLabel: metric + " ms", YLabel: "share of requests"}
			for _, s := range steps {
				v := stepValues(s, metric)
				if len(v) == 0 {
					continue
				}
				se := Series{Name: s.s.Label(), Steps: true}
				se.X, se.Y = cdf(v, 400)
				c.Series = append(c.Series, se)
			}
			if !c.Empty() {
				drawn = true
			}
			d.chart(c)
		}
	}
	if !drawn {
		d.p("No successful request to draw.")
	}
}

// spread keeps at most n items, evenly spaced, always with the first and last.
func spread[T any](v []T, n int) []T {
	if len(v) <= n {
		return v
	}
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, v[i*(len(v)-1)/(n-1)])
	}
	return out
}

// stepValues returns a step's measured successful TTFT or E2E values in ms.
func stepValues(s *stepV, metric string) []float64 {
	var v []float64
	for i := range s.run.Records {
		r := &s.run.Records[i]
		if r.Step != s.s.Step || r.Warmup || !r.OK() {
			continue
		}
		switch metric {
		case "TTFT":
			if r.FirstTokenNS > 0 {
				v = append(v, float64(r.FirstTokenNS-r.SentNS)/1e6)
			}
		default:
			if r.LastTokenNS > 0 {
				v = append(v, float64(r.LastTokenNS-r.SentNS)/1e6)
			}
		}
	}
	return v
}

// cdf returns an empirical CDF thinned to at most points points (the
// extremes kept), so a million-request step still draws a light SVG.
func cdf(v []float64, points int) (x, y []float64) {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	step := max(1, n/points)
	for i := 0; i < n; i += step {
		x, y = append(x, s[i]), append(y, float64(i+1)/float64(n))
	}
	if x[len(x)-1] != s[n-1] || y[len(y)-1] != 1 {
		x, y = append(x, s[n-1]), append(y, 1)
	}
	return x, y
}

// timeline draws every request's TTFT at its send time, per target, and
// failures apart, so throttling bursts, stalls and drifts show in time.
func (m *model) timeline(d *document) {
	d.h(2, "timeline", "Timeline")
	for ri, r := range m.runs {
		c := Chart{
			ID:     fmt.Sprintf("chart-timeline-%d", ri),
			Title:  "Requests over time, " + r.Name(),
			XLabel: "time since run start (s)",
			YLabel: "TTFT ms (failures: time to failure)",
		}
		byTarget := map[string]*Series{}
		var order []string
		errs := &Series{Name: "failed", Points: true, Color: "#D55E00"}
		// Keep at most ~4,000 points per target: every k-th request.
		counts := map[string]int{}
		for i := range r.Records {
			counts[r.Records[i].Target]++
		}
		seen := map[string]int{}
		for i := range r.Records {
			rec := &r.Records[i]
			if rec.SentNS == 0 {
				continue
			}
			k := max(1, counts[rec.Target]/4000)
			seen[rec.Target]++
			if !rec.OK() {
				errs.X = append(errs.X, float64(rec.SentNS)/1e9)
				errs.Y = append(errs.Y, float64(rec.DoneNS-rec.SentNS)/1e6)
				continue
			}
			if seen[rec.Target]%k != 0 || rec.FirstTokenNS == 0 {
				continue
			}
			se := byTarget[rec.Target]
			if se == nil {
				se = &Series{Name: rec.Target, Points: true}
				byTarget[rec.Target] = se
				order = append(order, rec.Target)
			}
			se.X = append(se.X, float64(rec.SentNS)/1e9)
			se.Y = append(se.Y, float64(rec.FirstTokenNS-rec.SentNS)/1e6)
		}
		sort.Strings(order)
		for _, n := range order {
			c.Series = append(c.Series, *byTarget[n])
		}
		if len(errs.X) > 0 {
			c.Series = append(c.Series, *errs)
		}
		// Step boundaries, labelled when few enough to read.
		starts := stepStarts(r)
		if len(starts) <= 12 {
			for _, st := range starts {
				c.Markers = append(c.Markers, Marker{X: st.at, Label: st.label})
			}
		}
		d.chart(c)
		m.serverCharts(d, ri, r)
	}
}

type stepStart struct {
	at    float64
	label string
}

func stepStarts(r *Run) []stepStart {
	first := map[int]int64{}
	for i := range r.Records {
		rec := &r.Records[i]
		if v, ok := first[rec.Step]; !ok || rec.IntendedNS < v {
			first[rec.Step] = rec.IntendedNS
		}
	}
	var out []stepStart
	for i := range r.Summary.Steps {
		s := &r.Summary.Steps[i]
		if v, ok := first[s.Step]; ok {
			out = append(out, stepStart{at: float64(v) / 1e9, label: fmt.Sprintf("#%d", s.Step)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// anomalies lists the streaming anomalies found.
func (m *model) anomalies(d *document) {
	d.h(2, "anomalies", "Streaming anomalies")
	var items []string
	for _, t := range m.targets {
		for _, a := range t.anomalies {
			items = append(
				items,
				fmt.Sprintf(
					"**%s**, %s — %s: %s (%d of %d streams)",
					t.name,
					a.Group,
					a.Kind,
					a.Detail,
					a.Affected,
					a.Of,
				),
			)
		}
	}
	if len(items) == 0 {
		d.p("None found: no fixed-interval pacing, stalls, multi-token chunks, mid-stream cuts or early first bytes.")
		return
	}
	d.add(list{items: items})
}
