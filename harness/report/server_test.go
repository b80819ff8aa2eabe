package report

import (
	"context"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"
)

// gpuRun is a run whose server samples come from two places: an NVML
// device (gpu.jsonl) with memory and power, and a real scrape of the mock
// in engine mode, whose /metrics carries DCGM-named GPU gauges.
func gpuRun(t *testing.T) *Run {
	t.Helper()
	base := serveMock(t, "../../examples/knee-mock.yaml")
	src, err := serverside.NewPrometheus(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	r := &Run{Dir: t.TempDir()}
	for i := range 4 {
		used := uint64(20+i) << 30
		total := uint64(80) << 30
		power := 300 + 50*float64(i)
		limit := 700.0
		util := 90.0
		r.Server = append(r.Server, results.Sample{Offset: int64(i) * 1e9, Source: "nvml",
			Devices: []results.Device{{Index: 0, UtilPercent: &util, MemUsedBytes: &used, MemTotalBytes: &total,
				PowerW: &power, PowerLimitW: &limit}}})
		s := results.Sample{Offset: int64(i)*1e9 + 5e8, Source: base + "/metrics"}
		if err := src.Read(context.Background(), &s); err != nil {
			t.Fatal(err)
		}
		r.Server = append(r.Server, s)
	}
	return r
}

// TestGPUCharts: report.html draws the GPUs' memory (used and total) and
// power (draw and limit) over time, from NVML and from DCGM series alike,
// beside the queue and utilisation charts.
func TestGPUCharts(t *testing.T) {
	t.Parallel()
	r := gpuRun(t)
	m := newModel([]*Run{r})
	d := &document{}
	m.serverCharts(d, 0, r)
	charts := map[string]Chart{}
	for _, b := range d.blocks {
		if c, ok := b.(chartBlock); ok {
			charts[c.c.ID] = c.c
		}
	}
	for _, tc := range []struct {
		id   string
		want []string // series names the chart must draw
	}{
		// NVML's used and total, the mock's DCGM used and total.
		{"chart-gpu-memory-0", []string{"GPU0 used", "GPU0 total", "used 127.0.0.1", "total 127.0.0.1"}},
		// Draw and limit from both.
		{"chart-gpu-power-0", []string{"GPU0 power", "GPU0 limit", "power 127.0.0.1", "limit 127.0.0.1"}},
		// Utilisation keeps NVML and DCGM util.
		{"chart-server-util-0", []string{"GPU0 util", "GPU util 127.0.0.1"}},
	} {
		c, ok := charts[tc.id]
		if !ok {
			t.Errorf("no %s among %d charts", tc.id, len(charts))
			continue
		}
		for _, w := range tc.want {
			found := false
			for _, s := range c.Series {
				if strings.HasPrefix(s.Name, w) && len(s.X) == 4 {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no series %q with 4 points", tc.id, w)
			}
		}
	}
	mem := charts["chart-gpu-memory-0"]
	for _, s := range mem.Series {
		if s.Name == "GPU0 used" && (s.Y[0] != 20 || s.Y[3] != 23) {
			t.Errorf("NVML memory used %v GiB, want 20..23", s.Y)
		}
		if strings.HasPrefix(s.Name, "total 127.0.0.1") && s.Y[0] != 80 {
			t.Errorf("DCGM total %v GiB, want the mock's 80", s.Y)
		}
	}
	page := HTML([]*Run{r})
	p := parsePage(t, page)
	for _, id := range []string{"chart-gpu-memory-0", "chart-gpu-power-0"} {
		if p.svgIDs[id] == 0 {
			t.Errorf("report.html draws nothing in %s", id)
		}
	}
	checkSVGs(t, page)
}

func TestGPUFaults(t *testing.T) {
	t.Parallel()
	x := func(v uint64) *uint64 { return &v }
	samples := []results.Sample{
		{Source: "nvml", Devices: []results.Device{{Index: 0, XIDErrors: x(0), ECCUncorrected: x(4)},
			{Index: 1, XIDErrors: x(0)}}},
		{Source: "http://gpu-host:9401/metrics", Metrics: map[string]float64{
			`testbed_gpu_xid_errors_total{UUID="u",gpu="2"}`: 1, `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="2"}`: 0}},
		// Device 0: ECC 4 → 5; device 1: two XIDs; the agent's GPU2: one XID more.
		{Source: "nvml", Devices: []results.Device{{Index: 0, XIDErrors: x(0), ECCUncorrected: x(5)},
			{Index: 1, XIDErrors: x(2)}}},
		{Source: "http://gpu-host:9401/metrics", Metrics: map[string]float64{
			`testbed_gpu_xid_errors_total{UUID="u",gpu="2"}`: 2, `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="2"}`: 0}},
	}
	got := strings.Join(gpuFaults(samples), "; ")
	want := "GPU0: 1 uncorrected ECC errors during the run; GPU1: 2 XID critical errors during the run; " +
		"gpu-host:9401 GPU2: 1 XID critical errors during the run"
	if got != want {
		t.Errorf("faults:\n got %s\nwant %s", got, want)
	}
	r := &Run{Dir: t.TempDir(), Server: samples}
	if md := Markdown([]*Run{r}); !strings.Contains(md, "**GPU fault** — GPU1: 2 XID critical errors") {
		t.Errorf("limitations do not report the XID errors:\n%s", section(md, "## Limitations"))
	}
}
