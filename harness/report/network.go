package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/llm-testbed/testbed/harness/analysis"
)

// partLabels name the decomposition's parts for people, in analysis.Parts'
// order.
var partLabels = map[string]string{
	analysis.PartDNS: "DNS", analysis.PartConnect: "connect", analysis.PartTLS: "TLS",
	analysis.PartConnWait: "conn. wait", analysis.PartRequestWrite: "request write", analysis.PartTTFB: "TTFB",
	analysis.PartFirstTokenGap: "first-token gap", analysis.PartDecode: "decode",
}

// decomposed are the steps with a decomposition, in report order.
func (m *model) decomposed() []*stepV {
	var out []*stepV
	for _, sc := range m.scenarios() {
		for _, t := range m.targets {
			for _, s := range t.scenario(sc) {
				if s.f.Decomposition != nil {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// network writes the decomposition section: where each step's time went,
// as p50 / p99 per part, with the measured round trip, and a stacked bar
// of the mean parts per step with the round trip marked.
func (m *model) network(d *document) {
	steps := m.decomposed()
	if len(steps) == 0 {
		return
	}
	d.h(2, "network", "Network share: where the time goes")
	d.p("Each request's latency split into its parts, from the client's timestamps: DNS, TCP connect and TLS " +
		"(paid by new connections only), waiting for a connection, writing the request, **TTFB** (request " +
		"written → first byte: the request's way up, the server's queue and prefill, the first byte's way down), " +
		"the gap from the first byte to the first token, and decode. **RTT** is the target's network round trip " +
		"without load, measured by TCP connects before and between steps. TTFT's network share is one round trip " +
		"plus the median connection set-up; the rest is the server's (queue and prefill). Cells are P50 / P99 in ms.")
	t := table{header: []string{"target", "step", "requests", "new conn.", "RTT ms", "TTFT P50: network + server"},
		right: []bool{false, false, true, true, true, true}}
	for _, name := range analysis.Parts {
		t.header = append(t.header, partLabels[name])
		t.right = append(t.right, true)
	}
	for _, s := range steps {
		dc := s.f.Decomposition
		share := fmt.Sprintf("%s = %s + %s", ms(dc.TTFTP50MS), ms(dc.TTFTNetworkMS), ms(dc.TTFTServerMS))
		if dc.NetworkRTTMS <= 0 {
			share = ms(dc.TTFTP50MS) + " (RTT not measured)"
		}
		row := []string{s.target, s.name(), fmt.Sprint(dc.Requests), fmt.Sprint(dc.NewConnections), rttCell(dc), share}
		for _, name := range analysis.Parts {
			p := dc.Part(name)
			row = append(row, ms(p.P50MS)+" / "+ms(p.P99MS))
		}
		t.rows = append(t.rows, row)
	}
	d.add(t)
	d.add(stackBlock{decompositionChart(steps)})
}

// rttCell is the measured round trip, or "—" when the run did not measure it.
func rttCell(dc *analysis.Decomposition) string {
	if dc.NetworkRTTMS <= 0 {
		return "—"
	}
	return ms(dc.NetworkRTTMS)
}

// maxBars bounds the stacked bar chart; a longer run's table still has
// every step.
const maxBars = 40

// decompositionChart is one bar per step: the mean of each part, stacked
// in the order they happen, and the round trip marked from where TTFB
// begins (its way up and way down are inside TTFB).
func decompositionChart(steps []*stepV) stackChart {
	c := stackChart{ID: "chart-decomposition", Title: "Where the time goes: mean per request, ms (RTT marked)"}
	for _, name := range analysis.Parts {
		c.Names = append(c.Names, partLabels[name])
	}
	for i, s := range steps {
		if i == maxBars {
			c.Omitted = len(steps) - maxBars
			break
		}
		dc := s.f.Decomposition
		bar := stackBar{Label: s.target + " " + s.name(), RTT: dc.NetworkRTTMS}
		for _, name := range analysis.Parts {
			p := dc.Part(name)
			if name == analysis.PartTTFB {
				bar.RTTAt = sum(bar.Parts)
			}
			bar.Parts = append(bar.Parts, p.MeanMS)
		}
		c.Bars = append(c.Bars, bar)
	}
	return c
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// stackBar is one horizontal bar of a stackChart.
type stackBar struct {
	Label string
	Parts []float64 // lengths, in the chart's Names order
	RTT   float64   // the round trip to mark; 0: none
	RTTAt float64   // where the mark begins on the bar
}

// stackChart is a horizontal stacked bar chart rendered to inline SVG.
type stackChart struct {
	ID, Title string
	Names     []string
	Bars      []stackBar
	Omitted   int // bars left out
}

// stackBlock puts a stackChart in a document.
type stackBlock struct{ c stackChart }

func (stackBlock) isBlock() {}

// stackPalette colours the parts: the report's palette with grey in place
// of black, which marks the round trip.
var stackPalette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#999999"}

// Geometry of the stacked bar chart.
const (
	stackLabelW = 230 // room for the bar labels
	stackBarH   = 16
	stackRowH   = 34 // bar, its RTT mark and the gap to the next
	stackTop    = 64 // title and legend
	stackBottom = 40 // axis
)

// SVG renders the chart as a standalone <svg> element.
func (c stackChart) SVG() string {
	h := stackTop + stackRowH*len(c.Bars) + stackBottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" class="chart" viewBox="0 0 %d %d" `+
		`width="%d" height="%d" role="img" aria-label="%s">`, esc(c.ID), chartW, h, chartW, h, esc(c.Title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, chartW, h)
	fmt.Fprintf(&b, `<text x="10" y="22" font-family="sans-serif" font-size="15" font-weight="bold">%s</text>`,
		esc(c.Title))
	c.legend(&b)
	xmax := 0.0
	for _, bar := range c.Bars {
		xmax = math.Max(xmax, math.Max(sum(bar.Parts), bar.RTTAt+bar.RTT))
	}
	if xmax <= 0 {
		xmax = 1
	}
	x0 := float64(stackLabelW)
	tx := func(v float64) float64 { return x0 + v/xmax*(chartW-padR-x0) }
	axisY := stackTop + stackRowH*len(c.Bars)
	b.WriteString(`<g font-family="sans-serif" font-size="11" fill="#333">`)
	for _, v := range ticks(0, xmax, 6) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>`, tx(v), stackTop-6, tx(v), axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, tx(v), axisY+14, num(v))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="12">ms</text>`, tx(xmax/2), axisY+30)
	for i, bar := range c.Bars {
		c.bar(&b, bar, stackTop+i*stackRowH, tx)
	}
	if c.Omitted > 0 {
		fmt.Fprintf(&b, `<text x="10" y="%d">… %d more steps in the table</text>`, axisY+30, c.Omitted)
	}
	b.WriteString(`</g></svg>`)
	return b.String()
}

// legend writes the part colours in one row under the title.
func (c stackChart) legend(b *strings.Builder) {
	x := 10.0
	for i, n := range c.Names {
		fmt.Fprintf(b, `<rect x="%.1f" y="34" width="12" height="12" fill="%s"/>`, x, stackPalette[i%len(stackPalette)])
		fmt.Fprintf(b, `<text x="%.1f" y="44" font-family="sans-serif" font-size="11">%s</text>`, x+16, esc(n))
		x += 22 + 6.5*float64(len([]rune(n)))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="40" x2="%.1f" y2="40" stroke="#000" stroke-width="2"/>`, x, x+18)
	fmt.Fprintf(b, `<text x="%.1f" y="44" font-family="sans-serif" font-size="11">network RTT</text>`, x+22)
}

// bar writes one bar at y: its label, its parts, and its RTT mark below.
func (c stackChart) bar(b *strings.Builder, bar stackBar, y int, tx func(float64) float64) {
	fmt.Fprintf(b, `<g class="bar" data-name="%s">`, esc(bar.Label))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, stackLabelW-6, y+12, esc(bar.Label))
	at := 0.0
	for i, v := range bar.Parts {
		if v > 0 {
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s %s ms</title></rect>`,
				tx(at), y, tx(at+v)-tx(at), stackBarH, stackPalette[i%len(stackPalette)], esc(c.Names[i]), ms(v))
		}
		at += v
	}
	if bar.RTT > 0 {
		ry := y + stackBarH + 5
		x1 := tx(bar.RTTAt)
		x2 := tx(bar.RTTAt + bar.RTT)
		fmt.Fprintf(b, `<g class="rtt"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2"/>`,
			x1, ry, x2, ry)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000"/>`, x1, ry-4, x1, ry+3)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000"/>`, x2, ry-4, x2, ry+3)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10">RTT %s ms</text></g>`, x2+4, ry+4, ms(bar.RTT))
	}
	b.WriteString(`</g>`)
}

// networkRanking says, under the TTFT ranking, when the difference between
// two targets is their network round trip rather than their serving: each
// target against the fastest, at the step that stands for chat.
func (m *model) networkRanking(d *document) {
	type entry struct {
		t  *targetV
		s  *stepV
		dc *analysis.Decomposition
	}
	var es []entry
	for _, t := range m.targets {
		s := t.chatStep()
		if s == nil || s.f.Decomposition == nil || s.f.Decomposition.NetworkRTTMS <= 0 || s.s.TTFT.Count == 0 {
			continue
		}
		es = append(es, entry{t, s, s.f.Decomposition})
	}
	if len(es) < 2 {
		return
	}
	best := es[0]
	for _, e := range es[1:] {
		if e.s.s.TTFT.P50 < best.s.s.TTFT.P50 {
			best = e
		}
	}
	var items []string
	for _, e := range es {
		if e.t == best.t {
			continue
		}
		if line := networkSentence(e.t.name, best.t.name, e.s.s.TTFT.P50-best.s.s.TTFT.P50,
			e.dc.NetworkRTTMS-best.dc.NetworkRTTMS, e.dc.TTFTNetworkMS-best.dc.TTFTNetworkMS); line != "" {
			items = append(items, line)
		}
	}
	if len(items) > 0 {
		d.p("Network or serving? (TTFT P50 at the lightest load; decomposition below)")
		d.add(list{items: items})
	}
}

// networkSentence explains a TTFT gap between target a and the faster b:
// dT is a's TTFT P50 minus b's, dRTT the difference of their measured round
// trips, dNet that of TTFT's network share (round trip plus connection
// set-up). It is "" when their networks do not differ (under 1 ms).
func networkSentence(a, b string, dT, dRTT, dNet float64) string {
	if math.Abs(dNet) < 1 && math.Abs(dRTT) < 1 {
		return ""
	}
	head := fmt.Sprintf("**%s** is %s slower at TTFT P50 than **%s**; ", a, human(dT), b)
	serving := dT - dNet
	switch {
	case dNet <= 0:
		return head + fmt.Sprintf("its network round trip is %s shorter, so its serving is %s slower.",
			human(-dRTT), human(serving))
	case math.Abs(serving) <= math.Max(0.25*dT, 5):
		return head + fmt.Sprintf("its network round trip is %s longer%s: the ranking between them is the network, "+
			"not the serving (server time differs by %+.0f ms).", human(dRTT), setupNote(dRTT, dNet), serving)
	case serving > 0:
		return head + fmt.Sprintf("its network round trip is %s longer%s, which explains %s of it; the remaining %s "+
			"is serving (queue and prefill).", human(dRTT), setupNote(dRTT, dNet), human(dNet), human(serving))
	default:
		return head + fmt.Sprintf("its network round trip is %s longer%s, more than the whole difference: its "+
			"serving is %s faster.", human(dRTT), setupNote(dRTT, dNet), human(-serving))
	}
}

// setupNote mentions the connection set-up when it adds to the round trip.
func setupNote(dRTT, dNet float64) string {
	if dNet-dRTT < 1 {
		return ""
	}
	return fmt.Sprintf(" and its connection set-up %s longer", human(dNet-dRTT))
}
