package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Series is one line (or set of points) of a chart.
type Series struct {
	Name   string
	X, Y   []float64
	Dash   string // SVG stroke-dasharray, "" for a solid line
	Color  string // "" picks the next palette colour
	Points bool   // draw markers only, no line (scatter)
	Steps  bool   // draw as a step function (CDFs)
}

// Marker is a vertical rule at X, labelled, e.g. a knee.
type Marker struct {
	X     float64
	Label string
}

// Chart is a 2-D chart rendered to inline SVG by the report's own code, so
// report.html needs nothing from the network.
type Chart struct {
	ID             string // element id, for links and tests
	Title          string
	XLabel, YLabel string
	LogX           bool
	Series         []Series
	Markers        []Marker
}

// Geometry of every chart, in SVG user units.
const (
	chartW, chartH = 720, 380
	padL, padR     = 70, 20
	padT, padB     = 40, 80
)

// palette is colour-blind safe (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// Empty reports whether the chart has no point to draw.
func (c Chart) Empty() bool {
	for _, s := range c.Series {
		for i := range s.X {
			if c.plottable(s.X[i], s.Y[i]) {
				return false
			}
		}
	}
	return true
}

// plottable reports whether a point can be placed on the chart's axes.
func (c Chart) plottable(x, y float64) bool {
	return finite(x) && finite(y) && (!c.LogX || x > 0)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// SVG renders the chart as a standalone <svg> element.
func (c Chart) SVG() string {
	var b strings.Builder
	fmt.Fprintf(
		&b,
		`<svg xmlns="http://www.w3.org/2000/svg" id="%s" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		esc(c.ID),
		chartW,
		chartH,
		chartW,
		chartH,
		esc(c.Title),
	)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, chartW, chartH)
	fmt.Fprintf(
		&b,
		`<text x="%d" y="22" font-family="sans-serif" font-size="15" font-weight="bold">%s</text>`,
		padL,
		esc(c.Title),
	)

	xmin, xmax, ymin, ymax := c.bounds()
	tx := func(x float64) float64 {
		if c.LogX {
			x, xmin, xmax := math.Log10(x), math.Log10(xmin), math.Log10(xmax)
			return padL + (x-xmin)/(xmax-xmin)*(chartW-padL-padR)
		}
		return padL + (x-xmin)/(xmax-xmin)*(chartW-padL-padR)
	}
	ty := func(y float64) float64 { return chartH - padB - (y-ymin)/(ymax-ymin)*(chartH-padT-padB) }

	// Grid and ticks.
	b.WriteString(`<g font-family="sans-serif" font-size="11" fill="#333">`)
	for _, v := range ticks(ymin, ymax, 6) {
		y := ty(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`, padL, y, chartW-padR, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, num(v))
	}
	var xt []float64
	if c.LogX {
		xt = logTicks(xmin, xmax)
	} else {
		xt = ticks(xmin, xmax, 8)
	}
	for _, v := range xt {
		x := tx(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>`, x, padT, x, chartH-padB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, chartH-padB+16, num(v))
	}
	fmt.Fprintf(
		&b,
		`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`,
		padL,
		chartH-padB,
		chartW-padR,
		chartH-padB,
	)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, padL, padT, padL, chartH-padB)
	fmt.Fprintf(
		&b,
		`<text x="%d" y="%d" text-anchor="middle" font-size="12">%s</text>`,
		(padL+chartW-padR)/2,
		chartH-padB+34,
		esc(c.XLabel),
	)
	fmt.Fprintf(
		&b,
		`<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" font-size="12">%s</text>`,
		(padT+chartH-padB)/2,
		esc(c.YLabel),
	)
	b.WriteString(`</g>`)

	// Markers.
	for _, m := range c.Markers {
		if !finite(m.X) || m.X < xmin || m.X > xmax || (c.LogX && m.X <= 0) {
			continue
		}
		x := tx(m.X)
		fmt.Fprintf(
			&b,
			`<g class="marker"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#777" stroke-dasharray="4 3"/>`,
			x,
			padT,
			x,
			chartH-padB,
		)
		fmt.Fprintf(
			&b,
			`<text x="%.1f" y="%d" font-family="sans-serif" font-size="11" fill="#555">%s</text></g>`,
			x+4,
			padT+12,
			esc(m.Label),
		)
	}

	// Series.
	for i, s := range c.Series {
		col := c.color(i)
		var pts []string
		py := math.NaN()
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if !c.plottable(x, y) {
				continue
			}
			if s.Steps && !math.IsNaN(py) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", tx(x), py))
			}
			py = ty(y)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", tx(x), py))
		}
		fmt.Fprintf(&b, `<g class="series" data-name="%s">`, esc(s.Name))
		if !s.Points && len(pts) > 1 {
			dash := ""
			if s.Dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dash))
			}
			fmt.Fprintf(
				&b,
				`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`,
				col,
				dash,
				strings.Join(pts, " "),
			)
		}
		if s.Points || (len(s.X) <= 40 && !s.Steps) {
			r := 3.0
			if s.Points {
				r = 1.8
			}
			for j := range s.X {
				x, y := s.X[j], s.Y[j]
				if !c.plottable(x, y) {
					continue
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`, tx(x), ty(y), r, col)
			}
		}
		b.WriteString(`</g>`)
	}

	// Legend below the plot, wrapping.
	lx, ly := float64(padL), float64(chartH-padB+52)
	for i, s := range c.Series {
		w := 28 + 7*float64(len([]rune(s.Name)))
		if lx+w > chartW-padR && lx > padL {
			lx, ly = padL, ly+16
		}
		col := c.color(i)
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dash))
		}
		fmt.Fprintf(
			&b,
			`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`,
			lx,
			ly-4,
			lx+18,
			ly-4,
			col,
			dash,
		)
		fmt.Fprintf(
			&b,
			`<text x="%.1f" y="%.1f" font-family="sans-serif" font-size="11">%s</text>`,
			lx+22,
			ly,
			esc(s.Name),
		)
		lx += w + 12
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// color is series i's colour: its own, or the palette's next.
func (c Chart) color(i int) string {
	if c.Series[i].Color != "" {
		return c.Series[i].Color
	}
	return palette[i%len(palette)]
}

// bounds returns the data range, padded so nothing touches the frame, with
// the y axis from 0 when all values are positive (honest bars of growth).
func (c Chart) bounds() (xmin, xmax, ymin, ymax float64) {
	xmin = math.Inf(1)
	xmax = math.Inf(-1)
	ymin = math.Inf(1)
	ymax = math.Inf(-1)
	for _, s := range c.Series {
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if !c.plottable(x, y) {
				continue
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	if math.IsInf(xmin, 1) {
		return 1, 10, 0, 1 // nothing to draw: any range valid on both scales
	}
	if ymin > 0 {
		ymin = 0
	}
	if ymax <= ymin {
		ymax = ymin + 1
	}
	ymax += (ymax - ymin) * 0.05
	if xmax <= xmin {
		if c.LogX {
			xmin, xmax = xmin/2, xmax*2
		} else {
			xmin, xmax = xmin-1, xmax+1
		}
	}
	return xmin, xmax, ymin, ymax
}

// ticks returns about n "nice" values (1, 2, 5 × 10^k steps) in [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if !(span > 0) {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// Whole multiples of step; below 1 the value is built by division by a
	// power of ten, which lands on the shortest decimal (0.6, not
	// 0.6000000000000001).
	inv := 1.0
	if mag < 1 {
		inv = math.Round(1 / mag)
	}
	var out []float64
	for k := math.Ceil(lo / step); k*step <= hi+step*1e-9; k++ {
		out = append(out, math.Round(k*step*inv)/inv)
	}
	return out
}

// logTicks returns 1-2-5 ticks per decade in [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var out []float64
	if !(lo > 0) || !(hi >= lo) || math.IsInf(hi, 0) {
		return nil
	}
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}

// num formats a tick or table value compactly: 1200 → "1200", 0.25 →
// "0.25", 12345.6 → "12346", 1.5e6 → "1.5M".
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 100 || a == 0:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case a >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// esc escapes text for XML/HTML content and attributes.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&#34;")
		case '\'':
			b.WriteString("&#39;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
