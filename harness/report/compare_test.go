package report

import (
	"regexp"
	"strings"
	"testing"
)

// TestCompareExample runs the shipped examples/compare.yaml — two mock
// profiles standing for two providers — and checks that the report ranks
// them in every scenario, with numbers, the way their cost models dictate:
// A's short steps win short chat; B's cheap prefill wins long documents and
// its 64 batch slots win high concurrency.
func TestCompareExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two targets through a ladder and scenarios in real time (about 20 s)")
	}
	// Not parallel: see TestKneeExample.
	r, starved := runPlan(t, "../../examples/compare.yaml", map[string]string{
		"provider-a": serveMock(t, "../../examples/provider-a.yaml"),
		"provider-b": serveMock(t, "../../examples/provider-b.yaml"),
	})
	md := Markdown([]*Run{r})
	concl := section(md, "## Conclusions")
	rank := regexp.MustCompile(`(?m)^1\. \*\*([a-z-]+)\*\* — .*\d.*\n2\. \*\*([a-z-]+)\*\* — .*\d`)
	cases := []struct {
		heading, first string
	}{
		{"### Short chat", "provider-a"},       // 4 ms steps vs 8 ms
		{"### Long document", "provider-b"},    // 1.5 µs/token prefill in one chunk vs 4 µs in 4K chunks
		{"### High concurrency", "provider-b"}, // 64 batch slots vs 16
	}
	for _, c := range cases {
		sec := section(concl, c.heading)
		m := rank.FindStringSubmatch(sec)
		if m == nil {
			t.Errorf("%s: no two-place ranking with numbers:\n%s", c.heading, sec)
			continue
		}
		if m[1] == m[2] {
			t.Errorf("%s: ranks %s twice:\n%s", c.heading, m[1], sec)
		}
		if !strings.Contains(sec, "Recommended: **"+m[1]+"**") {
			t.Errorf("%s: the recommendation is not the first of the ranking:\n%s", c.heading, sec)
		}
		if m[1] != c.first {
			check(t, starved, "%s: ranked %s then %s, want %s first:\n%s", c.heading, m[1], m[2], c.first, sec)
		}
	}
	// A pays its scale-to-zero load after idling; B never idles out.
	cold := section(concl, "### Cold start")
	if !strings.Contains(cold, "**provider-a** — cold TTFT") {
		t.Errorf("cold start not reported for provider-a:\n%s", cold)
	}
	for _, c := range r.Analysis.ColdStart {
		switch c.Target {
		case "provider-a":
			if c.DeltaMS < 200 {
				check(t, starved, "provider-a cold-start delta %.0f ms, want ≈ 250 ms", c.DeltaMS)
			}
		case "provider-b":
			if c.DeltaMS > 100 {
				check(t, starved, "provider-b cold-start delta %.0f ms, want ≈ 0", c.DeltaMS)
			}
		}
	}
	// The throughput chart overlays both targets.
	page := HTML([]*Run{r})
	p := parsePage(t, page)
	if n := p.svgIDs["chart-throughput-concurrency"]; n < 10 {
		t.Errorf("throughput chart has %d marks, want both targets' points", n)
	}
	if !strings.Contains(page, `data-name="provider-a"`) || !strings.Contains(page, `data-name="provider-b"`) {
		t.Error("throughput chart does not overlay both targets")
	}
}
