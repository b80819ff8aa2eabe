package report

import (
	"fmt"
	"html"
	"regexp"
	"strings"
)

// The report is built once as a list of blocks and rendered twice, to
// Markdown and to HTML, so the two never disagree.
type block interface{ isBlock() }

type heading struct {
	level int
	text  string
	id    string
}
type para struct{ text string } // inline **bold** and `code` allowed
type list struct {
	ordered bool
	items   []string
}
type table struct {
	header []string
	rows   [][]string
	right  []bool // right-align column i (numbers)
}
type chartBlock struct{ c Chart }
type code struct{ text string }

func (heading) isBlock()    {}
func (para) isBlock()       {}
func (list) isBlock()       {}
func (table) isBlock()      {}
func (chartBlock) isBlock() {}
func (code) isBlock()       {}

// document accumulates blocks.
type document struct{ blocks []block }

func (d *document) h(level int, id, format string, a ...any) {
	d.blocks = append(d.blocks, heading{level: level, id: id, text: fmt.Sprintf(format, a...)})
}
func (d *document) p(format string, a ...any) {
	d.blocks = append(d.blocks, para{fmt.Sprintf(format, a...)})
}
func (d *document) add(b block) { d.blocks = append(d.blocks, b) }
func (d *document) chart(c Chart) {
	if !c.Empty() {
		d.blocks = append(d.blocks, chartBlock{c})
	}
}

// markdown renders the document; charts become a pointer to report.html.
func (d *document) markdown() string {
	var b strings.Builder
	for _, bl := range d.blocks {
		switch v := bl.(type) {
		case heading:
			fmt.Fprintf(&b, "%s %s\n\n", strings.Repeat("#", v.level), v.text)
		case para:
			b.WriteString(v.text + "\n\n")
		case list:
			for i, it := range v.items {
				if v.ordered {
					fmt.Fprintf(&b, "%d. %s\n", i+1, it)
				} else {
					fmt.Fprintf(&b, "- %s\n", it)
				}
			}
			b.WriteString("\n")
		case table:
			row := func(cells []string) {
				b.WriteString("|")
				for _, c := range cells {
					b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
				}
				b.WriteString("\n")
			}
			row(v.header)
			b.WriteString("|")
			for i := range v.header {
				if i < len(v.right) && v.right[i] {
					b.WriteString(" ---: |")
				} else {
					b.WriteString(" --- |")
				}
			}
			b.WriteString("\n")
			for _, r := range v.rows {
				row(r)
			}
			b.WriteString("\n")
		case chartBlock:
			fmt.Fprintf(&b, "*Chart: %s (in report.html).*\n\n", v.c.Title)
		case stackBlock:
			fmt.Fprintf(&b, "*Chart: %s (in report.html).*\n\n", v.c.Title)
		case code:
			fmt.Fprintf(&b, "```\n%s\n```\n\n", strings.TrimRight(v.text, "\n"))
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

var (
	boldRE = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	codeRE = regexp.MustCompile("`([^`]+)`")
)

// inline converts the Markdown subset used in text (bold, code) to HTML.
func inline(s string) string {
	s = html.EscapeString(s)
	s = boldRE.ReplaceAllString(s, "<strong>$1</strong>")
	return codeRE.ReplaceAllString(s, "<code>$1</code>")
}

const style = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}th{background:#f3f3f3}
td.r{text-align:right;font-variant-numeric:tabular-nums}pre{background:#f6f6f6;padding:0.8em;overflow:auto;font-size:12px}
svg.chart{display:block;margin:0.5em 0 1.5em;max-width:100%;height:auto;border:1px solid #eee}h2{border-bottom:1px solid #ddd;padding-bottom:0.2em;margin-top:2em}
nav.toc{font-size:13px;line-height:1.9}nav.toc a{margin-right:0.9em;white-space:nowrap}`

// html renders the document as one self-contained page.
func (d *document) html(title string) string {
	var b strings.Builder
	fmt.Fprintf(
		&b,
		"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "+
			"charset=\"utf-8\">\n<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n",
		html.EscapeString(title),
		style,
	)
	// A table of contents of the sections, after the title.
	var toc strings.Builder
	toc.WriteString(`<nav class="toc">`)
	for _, bl := range d.blocks {
		if h, ok := bl.(heading); ok && h.level == 2 && h.id != "" {
			fmt.Fprintf(&toc, `<a href="#%s">%s</a> `, html.EscapeString(h.id), inline(h.text))
		}
	}
	toc.WriteString("</nav>\n")
	for _, bl := range d.blocks {
		switch v := bl.(type) {
		case heading:
			id := ""
			if v.id != "" {
				id = fmt.Sprintf(` id="%s"`, html.EscapeString(v.id))
			}
			fmt.Fprintf(&b, "<h%d%s>%s</h%d>\n", v.level, id, inline(v.text), v.level)
			if v.level == 1 {
				b.WriteString(toc.String())
			}
		case para:
			fmt.Fprintf(&b, "<p>%s</p>\n", inline(v.text))
		case list:
			tag := "ul"
			if v.ordered {
				tag = "ol"
			}
			fmt.Fprintf(&b, "<%s>\n", tag)
			for _, it := range v.items {
				fmt.Fprintf(&b, "<li>%s</li>\n", inline(it))
			}
			fmt.Fprintf(&b, "</%s>\n", tag)
		case table:
			b.WriteString("<table>\n<thead><tr>")
			for _, h := range v.header {
				fmt.Fprintf(&b, "<th>%s</th>", inline(h))
			}
			b.WriteString("</tr></thead>\n<tbody>\n")
			for _, r := range v.rows {
				b.WriteString("<tr>")
				for i, c := range r {
					cls := ""
					if i < len(v.right) && v.right[i] {
						cls = ` class="r"`
					}
					fmt.Fprintf(&b, "<td%s>%s</td>", cls, inline(c))
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</tbody>\n</table>\n")
		case chartBlock:
			b.WriteString(v.c.SVG())
			b.WriteString("\n")
		case stackBlock:
			b.WriteString(v.c.SVG())
			b.WriteString("\n")
		case code:
			fmt.Fprintf(&b, "<pre>%s</pre>\n", html.EscapeString(v.text))
		}
	}
	b.WriteString("</body>\n</html>\n")
	return b.String()
}
