package report

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

var (
	update   = flag.Bool("update", false, "rewrite testdata/golden/report.md from the committed run")
	regenRun = flag.Bool(
		"regen-run",
		false,
		"rerun testdata/golden-plan.yaml against the example mocks into testdata/golden-run first",
	)
)

const goldenRun = "testdata/golden-run"

// regenerate reruns the golden plan against the two example provider
// mocks, replacing the committed run. The run is then fixed input: the
// golden report depends on nothing but these files.
func regenerate(t *testing.T) {
	plan, err := harness.LoadPlan("testdata/golden-plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan.Targets[0].URL = serveMock(t, "../../examples/provider-a.yaml")
	plan.Targets[1].URL = serveMock(t, "../../examples/provider-b.yaml")
	if err := os.RemoveAll(goldenRun); err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Run(context.Background(), plan, goldenRun); err != nil {
		t.Fatal(err)
	}
	// Host facts would change with every regeneration; keep them neutral.
	var info results.RunInfo[harness.Plan]
	readJSON(t, filepath.Join(goldenRun, results.RunFile), &info)
	info.Host = results.Host{
		Hostname:    "golden-host",
		OS:          "linux",
		Arch:        "amd64",
		CPUModel:    "test CPU",
		CPUCores:    2,
		CPUThreads:  2,
		MemoryBytes: 8 << 30,
		GoVersion:   "go1.26",
		GOMAXPROCS:  2,
	}
	writeJSON(t, filepath.Join(goldenRun, results.RunFile), info)
	_ = os.Remove(filepath.Join(goldenRun, results.ClientFile))
}

// TestGoldenReport renders the committed run and compares report.md with
// the golden file byte for byte; -update rewrites it after a deliberate
// change (review the diff).
func TestGoldenReport(t *testing.T) {
	if *regenRun {
		regenerate(t)
	}
	r, err := Load(goldenRun, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := Markdown([]*Run{r})
	golden := filepath.Join("testdata", "golden", "report.md")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf(
					"report.md differs from %s at line %d:\n got: %s\nwant: %s\n(run with -update after checking the change)",
					golden,
					i+1,
					g,
					w,
				)
			}
		}
	}
	// The order the methodology asks for: conclusions first, then the
	// dimensions, limitations, and the environment last.
	order := []string{"## Conclusions", "### Short chat", "### Long document", "### High concurrency", "### Cold start",
		"## Concurrency ladder", "## Rate ladder", "## Long context", "\n## Cold start", "## Streaming vs non-streaming",
		"## Connection reuse vs new connection per request", "## Request throughput vs token throughput",
		"## Latency distributions", "## Timeline", "## Streaming anomalies", "## Limitations and uncertainty", "## Environment and parameters"}
	last := -1
	for _, h := range order {
		i := strings.Index(got, "\n"+h)
		if i < 0 || i < last {
			t.Errorf("%q missing or out of order", h)
		}
		last = i
	}
}

// TestGoldenHTML checks the HTML of the same run: it parses, needs nothing
// from the network, every chart is drawn with marks, and its headings
// match the Markdown's.
func TestGoldenHTML(t *testing.T) {
	t.Parallel()
	r, err := Load(goldenRun, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page := HTML([]*Run{r})
	p := parsePage(t, page)
	if len(p.external) > 0 || p.scripts > 0 {
		t.Errorf("report.html needs the network or runs scripts: %v, %d scripts", p.external, p.scripts)
	}
	if n := checkSVGs(t, page); n != len(p.svgIDs) {
		t.Errorf("%d svg elements, %d with ids", n, len(p.svgIDs))
	}
	for _, id := range []string{
		"chart-throughput-concurrency",                                             // targets overlaid
		"chart-ttft-concurrency", "chart-itl-concurrency", "chart-e2e-concurrency", // P50/P95/P99 vs load
		"chart-ttft-context",                  // TTFT vs context length
		"chart-cdf-TTFT-0", "chart-cdf-E2E-1", // latency CDFs
		"chart-timeline-0", // the run's timeline
	} {
		if marks, ok := p.svgIDs[id]; !ok || marks == 0 {
			t.Errorf("chart %s missing or empty (%d marks)", id, marks)
		}
	}
	// The table of contents links every section that exists.
	for _, id := range []string{"conclusions", "scenario-concurrency", "limitations", "environment"} {
		if !strings.Contains(page, `<a href="#`+id+`">`) || !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("no contents link to #%s", id)
		}
	}
	md := Markdown([]*Run{r})
	for _, h := range p.headings {
		if !strings.Contains(md, h) {
			t.Errorf("HTML heading %q not in report.md", h)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
