package report

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestNetworkSentence: the conclusions say whether a TTFT gap is the
// network or the serving, from the measured round trips.
func TestNetworkSentence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		dT, dRTT, dNet float64
		want           string // "" for no sentence
	}{
		// The gap is the round trip within a few ms.
		{"network", 38, 40, 40, "its network round trip is 40.0 ms longer: the ranking between them is the network"},
		// The round trip explains half; the rest is serving.
		{"partly", 60, 30, 30, "which explains 30.0 ms of it; the remaining 30.0 ms is serving"},
		// A longer set-up (new connections) adds to the round trip.
		{"set-up", 100, 50, 100, "and its connection set-up 50.0 ms longer"},
		// Slower despite a shorter round trip: all serving.
		{"shorter", 20, -30, -30, "its network round trip is 30.0 ms shorter, so its serving is 50.0 ms slower"},
		// The round trip exceeds the whole gap: its serving is faster.
		{"faster serving", 20, 60, 60, "its serving is 40.0 ms faster"},
		// Same network: nothing to say.
		{"same network", 30, 0.2, 0.3, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := networkSentence("B", "A", c.dT, c.dRTT, c.dNet)
			if c.want == "" && got != "" || !strings.Contains(got, c.want) {
				t.Errorf("got %q, want it to contain %q", got, c.want)
			}
		})
	}
}

// TestNetworkExample runs examples/network.yaml, shortened, against the
// real mock: one server behind a same-region and a cross-region link. The
// decomposition must put the TTFT gap in the network, analysis.json must
// carry it per step with the measured round trip, and the conclusions
// must say the ranking is the network.
func TestNetworkExample(t *testing.T) {
	t.Parallel()
	plan, err := harness.LoadPlan("../../examples/network.yaml")
	if err != nil {
		t.Fatal(err)
	}
	url := serveMock(t, "../../examples/provider-a.yaml")
	for i := range plan.Targets {
		plan.Targets[i].URL = url
	}
	plan.Load.Concurrency = []int{1}
	plan.Load.Requests = 10
	plan.Scenarios = nil
	plan.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
	dir := t.TempDir()
	if _, err := harness.Run(t.Context(), plan, dir); err != nil {
		t.Fatal(err)
	}
	r, err := Load(dir, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := analysis.Write(dir, r.Analysis); err != nil {
		t.Fatal(err)
	}
	var a analysis.Analysis
	readJSON(t, filepath.Join(dir, results.AnalysisFile), &a)
	dec := map[string]*analysis.Decomposition{}
	for _, s := range a.Steps {
		dec[s.Target] = s.Decomposition
	}
	near, far := dec["near"], dec["far"]
	if near == nil || far == nil {
		t.Fatalf("analysis.json steps without a decomposition: %+v", a.Steps)
	}
	// Measured round trips: 2 ms and 70 ms plus loopback and timer delays
	// (tens of ms under the race detector on a loaded machine).
	check := t.Errorf
	if raceEnabled {
		check = t.Logf
	}
	if near.NetworkRTTMS < 2 || far.NetworkRTTMS < 70 {
		t.Errorf("network_rtt_ms near %.1f far %.1f, less than the links' 2 and 70", near.NetworkRTTMS, far.NetworkRTTMS)
	}
	if near.NetworkRTTMS > 20 || far.NetworkRTTMS > 90 {
		check("network_rtt_ms near %.1f far %.1f, want ≈ 2 and ≈ 70", near.NetworkRTTMS, far.NetworkRTTMS)
	}
	md := Markdown([]*Run{r})
	page := HTML([]*Run{r})
	for _, want := range []string{`id="chart-decomposition"`, `class="rtt"`, "Network share"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %s", want)
		}
	}
	paths, err := WriteCharts(filepath.Join(dir, "charts"), []*Run{r})
	if err != nil || !slices.Contains(paths, filepath.Join(dir, "charts", "chart-decomposition.svg")) {
		t.Errorf("WriteCharts: %v, %v: no chart-decomposition.svg", paths, err)
	}
	// The same server: the gap is the network, whatever the machine's
	// load does to the server's share, as long as it does it to both.
	i := max(strings.Index(md, "Network or serving"), 0)
	note := md[i:min(i+400, len(md))]
	if !strings.Contains(note, "**far** is") || !strings.Contains(note, "the ranking between them is the network, not the") {
		check("conclusions do not put the TTFT gap in the network:\n%s", note)
	}
	t.Logf("%s", note)
}
