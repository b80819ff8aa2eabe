package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// ranked is one target's place in a scenario's ranking.
type ranked struct {
	t     *targetV
	score float64 // lower is better unless the ranking says otherwise
	text  string
}

// conclusions writes the report's first section: per use case, the targets
// ranked, each with the two or three numbers that decide it.
func (m *model) conclusions(d *document) {
	d.h(2, "conclusions", "Conclusions")
	var total, failed int
	for _, t := range m.targets {
		for _, s := range t.steps {
			total += s.s.Requests
			failed += analysis.Failed(s.s)
		}
	}
	names := make([]string, len(m.targets))
	for i, t := range m.targets {
		names[i] = "**" + t.name + "**"
	}
	d.p(
		"%d target(s) (%s), %s measured requests, %s failed (%s). Rankings use the numbers shown; "+
			"a difference inside the confidence intervals of the tables below is not a difference.",
		len(
			m.targets,
		),
		strings.Join(names, ", "),
		commas(int64(total)),
		commas(int64(failed)),
		pct(ratio(failed, total)),
	)

	m.glance(d)
	m.shortChat(d)
	m.networkRanking(d) // network.go
	m.longDocument(d)
	m.highConcurrency(d)
	if c := m.coldStartLine(); len(c) > 0 {
		d.h(3, "", "Cold start")
		d.add(list{items: c})
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// chatStep is the step that stands for interactive chat: the lightest
// load of a ladder, else of the other scenarios at low concurrency.
func (t *targetV) chatStep() *stepV {
	for _, sc := range []string{harness.ScenarioConcurrency, harness.ScenarioRate, harness.ScenarioWarm, harness.ScenarioStreaming, harness.ScenarioShortOutput} {
		for _, s := range t.scenario(sc) {
			if s.s.OK > 0 {
				return s
			}
		}
	}
	return nil
}

func (m *model) shortChat(d *document) {
	d.h(3, "short-chat", "Short chat (interactive, low load)")
	var rs []ranked
	var keys []string
	for _, t := range m.targets {
		s := t.chatStep()
		if s == nil {
			continue
		}
		// Rank by the tail when the sample can bound it, else by the median:
		// a P95 of eight requests is their maximum, one hiccup decides it.
		st, name := s.s.TTFT, "TTFT"
		if st.Count == 0 {
			st, name = s.s.E2E, "E2E"
		}
		key := st.P95
		metric := name + " P95"
		other := fmt.Sprintf("P50 %s", human(st.P50))
		if need := analysis.MinSamples(95, analysis.DefaultConfidence); int(st.Count) < need {
			key = st.P50
			metric = name + " P50"
			other = fmt.Sprintf(
				"P95 %s, too few samples to rank by: %d < %d",
				human(st.P95),
				st.Count,
				need,
			)
		}
		keys = append(keys, metric)
		txt := fmt.Sprintf("%s **%s** (%s), ITL P50 %s, E2E P95 %s — %s %s, %d requests",
			metric, human(key), other, human(s.s.ITL.P50), human(s.s.E2E.P95),
			s.s.Scenario, results.LoadLabel(s.s.Concurrency, s.s.Rate), s.s.OK)
		if e := analysis.ErrorRate(s.s); e > 0 {
			txt += fmt.Sprintf(", %s errors", pct(e))
		}
		rs = append(rs, ranked{t: t, score: key, text: txt})
	}
	what := "TTFT"
	if len(keys) > 0 && allSame(keys) {
		what = keys[0]
	}
	m.writeRanking(d, rs, false, "lowest "+what+" first", what)
}

func allSame(v []string) bool {
	for _, x := range v {
		if x != v[0] {
			return false
		}
	}
	return true
}

func (m *model) longDocument(d *document) {
	d.h(3, "long-document", "Long document (long prompts)")
	var curves []*targetV
	minLen := 0
	for _, t := range m.targets {
		if t.ctx != nil && len(t.ctx.Points) > 0 {
			curves = append(curves, t)
			if minLen == 0 || len(t.ctx.Points) < minLen {
				minLen = len(t.ctx.Points)
			}
		}
	}
	if len(curves) == 0 {
		d.p("Not measured: add `scenarios.long_context` to the plan (buckets of 2K–32K input tokens).")
		return
	}
	var rs []ranked
	for _, t := range curves {
		p := t.ctx.Points[minLen-1] // the longest bucket every target has
		txt := fmt.Sprintf("TTFT P50 **%s** at %s input tokens", human(p.TTFTMS), commas(int64(p.Tokens)))
		if t.ctx.PrefillTokensPerS > 0 {
			txt += fmt.Sprintf(", prefill ≈ %s tokens/s", rate(t.ctx.PrefillTokensPerS))
		}
		switch {
		case t.ctx.PrefillTokensPerS == 0:
			txt += ", prefill cost not resolved (TTFT did not grow measurably across the shorter buckets)"
		case t.ctx.Bend != nil:
			txt += fmt.Sprintf(
				", TTFT bends upward after %s tokens (+%.0f %% over linear)",
				commas(int64(*t.ctx.Bend)),
				t.ctx.Excess*100,
			)
		default:
			txt += ", no bend: TTFT grows linearly over every bucket"
		}
		rs = append(rs, ranked{t: t, score: p.TTFTMS, text: txt})
	}
	m.writeRanking(d, rs, false, "lowest TTFT on the longest common bucket first", "TTFT")
}

func (m *model) highConcurrency(d *document) {
	d.h(3, "high-concurrency", "High concurrency (capacity)")
	var rs []ranked
	for _, t := range m.targets {
		k, ok := t.knees[analysis.LadderConcurrency]
		if !ok {
			k, ok = t.knees[analysis.LadderRate]
		}
		if !ok || k.Steps == 0 {
			continue
		}
		unit := func(v float64) string {
			if k.Ladder == analysis.LadderRate {
				return num(v) + " req/s"
			}
			return "concurrency " + num(v)
		}
		var b strings.Builder
		score := k.MaxThroughput
		if k.ThroughputKnee != nil {
			fmt.Fprintf(&b, "throughput knee at **%s** (%s output tok/s there; most seen %s)", unit(*k.ThroughputKnee),
				rate(throughputAt(t, k.Ladder, *k.ThroughputKnee)), rate(k.MaxThroughput))
		} else {
			fmt.Fprintf(&b, "no throughput knee: still scaling at the top of the ladder (%s output tok/s at %s) — extend the "+
				"ladder",
				rate(k.MaxThroughput), unit(k.MaxThroughputAt))
		}
		if k.BestOperatingPoint != nil {
			score = k.BestThroughput
			s := t.stepAt(ladderScenario(k.Ladder), *k.BestOperatingPoint)
			p99 := ""
			if s != nil {
				p99 = fmt.Sprintf(", TTFT P99 %s, E2E P99 %s", human(s.s.TTFT.P99), human(s.s.E2E.P99))
			}
			fmt.Fprintf(
				&b,
				"; best operating point **%s**: %s output tok/s%s",
				unit(*k.BestOperatingPoint),
				rate(k.BestThroughput),
				p99,
			)
		} else {
			b.WriteString("; no step met the SLOs with < 1 % errors")
		}
		if k.LatencyKnee != nil {
			fmt.Fprintf(&b, "; P99 takes off at %s (%s)", unit(*k.LatencyKnee), metricName(k.LatencyMetric))
		}
		rs = append(rs, ranked{t: t, score: score, text: b.String()})
	}
	if len(rs) == 0 {
		d.p("Not measured: add a concurrency or rate ladder (`load.concurrency`, `load.rate`).")
		return
	}
	m.writeRanking(d, rs, true, "most output tokens/s at the best operating point first", "throughput")
	if lines := m.saturationLines(); len(lines) > 0 {
		d.p("What saturated at the knee (the rules: docs/saturation.md):")
		d.add(list{items: lines})
	}
}

func ladderScenario(ladder string) string {
	if ladder == analysis.LadderRate {
		return harness.ScenarioRate
	}
	return harness.ScenarioConcurrency
}

func throughputAt(t *targetV, ladder string, load float64) float64 {
	if s := t.stepAt(ladderScenario(ladder), load); s != nil {
		return s.s.OutputTokensPerS
	}
	return 0
}

// writeRanking sorts and prints a ranking, and says by how much the first
// beats the second.
func (m *model) writeRanking(d *document, rs []ranked, higherBetter bool, order, what string) {
	if len(rs) == 0 {
		d.p("Not measured.")
		return
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if higherBetter {
			return rs[i].score > rs[j].score
		}
		return rs[i].score < rs[j].score
	})
	items := make([]string, len(rs))
	for i, r := range rs {
		items[i] = fmt.Sprintf("**%s** — %s", r.t.name, r.text)
	}
	if len(rs) > 1 {
		a, b := rs[0].score, rs[1].score
		var rel string
		switch {
		case higherBetter && b > 0 && a >= 2*b:
			rel = fmt.Sprintf("%.1f× the %s", a/b, what)
		case higherBetter && b > 0:
			rel = fmt.Sprintf("%.0f %% more %s", (a/b-1)*100, what)
		case !higherBetter && b > 0:
			rel = fmt.Sprintf("%.0f %% lower %s", (1-a/b)*100, what)
		}
		than := " than"
		if strings.Contains(rel, "×") {
			than = " of"
		}
		d.p("Recommended: **%s** (%s%s **%s**). Ranked %s:", rs[0].t.name, rel, than, rs[1].t.name, order)
	} else {
		d.p("Ranked %s (one target):", order)
	}
	d.add(list{ordered: true, items: items})
}

// coldStartLine summarises the cold-start penalty per target.
func (m *model) coldStartLine() []string {
	var out []string
	for _, t := range m.targets {
		c := t.cold
		if c == nil {
			continue
		}
		s := fmt.Sprintf("**%s** — cold TTFT P50 %s vs warm %s: **%+.1f ms** (×%.1f) over %d cold starts",
			t.name, human(c.ColdP50), human(c.WarmP50), c.DeltaMS, c.Ratio, c.ColdN)
		if !c.Significant {
			s += " (not significant at 95 %: too few samples or overlapping intervals)"
		}
		out = append(out, s)
	}
	return out
}

// metricName turns an analysis metric key into its printed name.
func metricName(key string) string {
	return map[string]string{"ttft_p99": "TTFT P99", "e2e_p99": "E2E P99"}[key]
}

// glance is the comparison matrix: every target on one row, the numbers
// each scenario ranks by in the columns (only when there is more than one
// target to compare).
func (m *model) glance(d *document) {
	if len(m.targets) < 2 {
		return
	}
	t := table{
		header: []string{
			"target",
			"TTFT P50, low load",
			"ITL P50, low load",
			"best operating point",
			"output tok/s there",
			"most output tok/s",
			"long-prompt TTFT P50",
			"cold-start penalty",
			"errors",
		},
		right: []bool{false, true, true, true, true, true, true, true, true},
	}
	for _, tv := range m.targets {
		row := []string{tv.name, "—", "—", "—", "—", "—", "—", "—", "—"}
		if s := tv.chatStep(); s != nil {
			row[1], row[2] = human(s.s.TTFT.P50), human(s.s.ITL.P50)
		}
		k, ok := tv.knees[analysis.LadderConcurrency]
		if !ok {
			k, ok = tv.knees[analysis.LadderRate]
		}
		if ok && k.Steps > 0 {
			if k.BestOperatingPoint != nil {
				row[3] = num(*k.BestOperatingPoint)
				if k.Ladder == analysis.LadderRate {
					row[3] += " req/s"
				} else {
					row[3] = "c=" + row[3]
				}
				row[4] = rate(k.BestThroughput)
			}
			row[5] = rate(k.MaxThroughput)
		}
		if tv.ctx != nil && len(tv.ctx.Points) > 0 {
			p := tv.ctx.Points[len(tv.ctx.Points)-1]
			row[6] = fmt.Sprintf("%s @ %s tok", human(p.TTFTMS), commas(int64(p.Tokens)))
		}
		if tv.cold != nil {
			row[7] = fmt.Sprintf("%+.0f ms", tv.cold.DeltaMS)
		}
		var total, failed int
		for _, s := range tv.steps {
			total += s.s.Requests
			failed += analysis.Failed(s.s)
		}
		row[8] = pct(ratio(failed, total))
		t.rows = append(t.rows, row)
	}
	d.p("At a glance — every target on identical requests, interleaved step by step:")
	d.add(t)
}
