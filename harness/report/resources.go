package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness/analysis"
)

// resourceColumns are the figures the ladder's resource table can show,
// in order, with their heading; a column appears when any row has it.
var resourceColumns = []struct {
	name, head string
}{
	{analysis.FigRunning, "running"},
	{analysis.FigWaiting, "waiting"},
	{analysis.FigKVCache, "KV cache %"},
	{analysis.FigPreemptions, "preempted"},
	{analysis.FigPrefixHitRate, "prefix hit %"},
	{analysis.FigGPUUtil, "GPU util %"},
	{analysis.FigSMActive, "SM active %"},
	{analysis.FigSMOccupancy, "SM occ. %"},
	{analysis.FigTensor, "tensor %"},
	{analysis.FigDRAMBW, "DRAM BW %"},
	{analysis.FigMemUsed, "mem used GiB"},
	{analysis.FigPower, "power W"},
	{analysis.FigSMClock, "SM MHz"},
	{analysis.FigThrottled, "pwr/therm events %"},
	{analysis.FigPCIeTx, "PCIe tx MB/s"},
	{analysis.FigPCIeRx, "PCIe rx MB/s"},
}

// resourceTable writes, under a ladder, the GPU and server state of each
// step's measured window: mean / P95 / max of the busiest source, the
// change of counters, or why a figure is missing.
func (m *model) resourceTable(d *document, scs []string) {
	rows := m.rowsOf(scs)
	present := map[string]bool{}
	any := false
	for _, s := range rows {
		if s.f.Resources == nil {
			continue
		}
		for _, f := range s.f.Resources.Figures {
			present[f.Name] = true
			any = true
		}
	}
	if !any {
		return
	}
	h := stepHeader(scs)
	lead := len(h)
	var cols []string
	for _, c := range resourceColumns {
		if present[c.name] {
			h = append(h, c.head)
			cols = append(cols, c.name)
		}
	}
	t := table{header: h, right: rightFrom(lead, len(h))}
	sources := map[string]bool{}
	for _, s := range rows {
		r := stepCells(s, scs)
		for _, c := range cols {
			r = append(r, resourceCell(s.f.Resources, c, sources))
		}
		t.rows = append(t.rows, r)
	}
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, "`"+n+"`")
	}
	sort.Strings(names)
	d.p("GPU and server state over each step's measured window (warm-up excluded): mean / P95 / max of the "+
		"samples, counters as their change over the window; the busiest source of each figure (%s). "+
		"A figure with too few samples in a window says so instead of a number.", strings.Join(names, ", "))
	d.add(t)
	if total := totalOf(rows); total != "" {
		d.p("%s", total)
	}
}

// resourceCell formats one figure of one step.
func resourceCell(r *analysis.StepResources, name string, sources map[string]bool) string {
	if r == nil {
		return "—"
	}
	f, ok := r.Get(name)
	if !ok {
		for _, g := range r.Figures {
			if g.Name == name && g.Note != "" {
				return fmt.Sprintf("n=%d, too few", g.Samples)
			}
		}
		return "—"
	}
	sources[f.Source] = true
	if f.P95 == nil || f.Max == nil {
		return fig(*f.Mean)
	}
	return fig(*f.Mean) + " / " + fig(*f.P95) + " / " + fig(*f.Max)
}

// totalOf says the framebuffer size and power limit once, not per row.
func totalOf(rows []*stepV) string {
	var parts []string
	for _, s := range rows {
		if s.f.Resources == nil {
			continue
		}
		if v, ok := s.f.Resources.Value(analysis.FigMemTotal); ok && len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("GPU memory %s GiB", fig(v)))
			if l, ok := s.f.Resources.Value(analysis.FigPowerLimit); ok {
				parts = append(parts, fmt.Sprintf("power limit %s W", fig(l)))
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + "."
}

// fig formats a resource figure: integers above 10, one decimal below.
func fig(v float64) string {
	switch {
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.0f", v)
	case v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// saturationLines are the conclusions' "what saturated" items: each
// ladder's knee verdict, one sentence per target and ladder.
func (m *model) saturationLines() []string {
	var out []string
	for _, t := range m.targets {
		for _, ladder := range []string{analysis.LadderConcurrency, analysis.LadderRate} {
			k, ok := t.knees[ladder]
			if !ok || k.Verdict == "" {
				continue
			}
			out = append(out, fmt.Sprintf("**%s** — %s", t.name, k.Verdict))
		}
	}
	return out
}
