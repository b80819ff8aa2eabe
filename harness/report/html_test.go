package report

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// parsedPage is what the HTML checks need from report.html.
type parsedPage struct {
	svgIDs   map[string]int // chart id → number of drawn marks (polyline, circle)
	headings []string
	external []string // src/href attributes that would need the network
	scripts  int
}

func parsePage(t *testing.T, page string) parsedPage {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("report.html does not parse: %v", err)
	}
	p := parsedPage{svgIDs: map[string]int{}}
	var walk func(n *html.Node, svg string)
	walk = func(n *html.Node, svg string) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "svg":
				for _, a := range n.Attr {
					if a.Key == "id" {
						svg = a.Val
						p.svgIDs[svg] += 0
					}
				}
			case "polyline", "circle":
				if svg != "" {
					p.svgIDs[svg]++
				}
			case "h1", "h2", "h3":
				var b strings.Builder
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.TextNode {
						b.WriteString(c.Data)
					}
				}
				p.headings = append(p.headings, b.String())
			case "script":
				p.scripts++
			}
			for _, a := range n.Attr {
				if (a.Key == "src" || a.Key == "href") &&
					(strings.Contains(a.Val, "://") || strings.HasPrefix(a.Val, "//")) {
					p.external = append(p.external, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, svg)
		}
	}
	walk(doc, "")
	return p
}

// checkSVGs decodes every inline <svg> with encoding/xml: a chart that is
// not well-formed XML would not render standalone or in an image converter.
func checkSVGs(t *testing.T, page string) int {
	t.Helper()
	n := 0
	for rest := page; ; {
		i := strings.Index(rest, "<svg ")
		if i < 0 {
			return n
		}
		j := strings.Index(rest[i:], "</svg>")
		if j < 0 {
			t.Fatal("unterminated <svg>")
		}
		svg := rest[i : i+j+len("</svg>")]
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			if _, err := dec.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("chart %d is not well-formed XML: %v", n, err)
			}
		}
		n++
		rest = rest[i+j:]
	}
}

func TestChartSVGEscapes(t *testing.T) {
	t.Parallel()
	c := Chart{ID: "x", Title: `a <b> & "c"`, XLabel: "x'", YLabel: "y",
		Series:  []Series{{Name: "t<1>", X: []float64{1, 2, 3}, Y: []float64{1, 4, 9}}},
		Markers: []Marker{{X: 2, Label: "knee & more"}}}
	if n := checkSVGs(t, c.SVG()); n != 1 {
		t.Fatalf("%d svgs", n)
	}
}

func TestChartEmpty(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		c     Chart
		empty bool
	}{
		{"no series", Chart{}, true}, // nothing to draw
		{"NaN only", Chart{Series: []Series{{X: []float64{1}, Y: []float64{nan()}}}}, true}, // unplottable
		{"one point", Chart{Series: []Series{{X: []float64{1}, Y: []float64{2}}}}, false},   // drawable
		{
			"log x, zero",
			Chart{LogX: true, Series: []Series{{X: []float64{0}, Y: []float64{2}}}},
			true,
		}, // no place for 0 on a log axis
	}
	for _, c := range cases {
		if got := c.c.Empty(); got != c.empty {
			t.Errorf("%s: Empty() = %v", c.name, got)
		}
		checkSVGs(t, c.c.SVG()) // every case still renders valid XML
	}
}

func TestTicks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 64, 8, []float64{0, 10, 20, 30, 40, 50, 60}}, // step 8 rounds up to 10
		{0, 1, 5, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},   // step 0.2
		{3, 3, 5, []float64{3}},                          // empty span
		{0, 3800, 6, []float64{0, 1000, 2000, 3000}},     // step 633 rounds to 1000
	}
	for _, c := range cases {
		got := ticks(c.lo, c.hi, c.n)
		if len(got) != len(c.want) {
			t.Errorf("ticks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("ticks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
				break
			}
		}
	}
	if got := logTicks(1000, 40000); len(got) != 5 || got[0] != 1000 || got[4] != 20000 {
		t.Errorf("logTicks(1000, 40000) = %v", got)
	}
}

func TestNumberFormats(t *testing.T) {
	t.Parallel()
	cases := []struct {
		got, want string
	}{
		{num(1200), "1200"}, {num(0.25), "0.25"}, {num(1.5e6), "1.5M"}, {num(12.34), "12.3"},
		{ms(0), "0"}, {ms(2.345), "2.35"}, {ms(23.45), "23.4"}, {ms(1234.5), "1234"},
		{human(850), "850 ms"}, {human(2310), "2.31 s"},
		{rate(12345.6), "12,346"}, {rate(4.5), "4.50"},
		{commas(1234567), "1,234,567"}, {commas(-1234), "-1,234"}, {commas(12), "12"},
		{pct(0), "0 %"}, {pct(0.0004), "<0.1 %"}, {pct(0.123), "12.3 %"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func nan() float64 { var z float64; return z / z }
