package gpu

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"
)

// fixedDevices is a Source answering the same devices every time.
type fixedDevices []results.Device

func (fixedDevices) Name() string { return "fixed" }
func (f fixedDevices) Read(_ context.Context, s *results.Sample) error {
	s.Devices = append([]results.Device(nil), f...)
	return nil
}

// scrapeAgent serves src through the agent and scrapes it with the
// Prometheus source and its default series, as a remote harness would.
func scrapeAgent(t *testing.T, src serverside.Source) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(NewAgent(src, time.Second))
	t.Cleanup(srv.Close)
	p, err := serverside.NewPrometheus(
		srv.URL,
		serverside.WithSeries(append([]string{"testbed_gpu_agent_*"}, serverside.DefaultSeries...)...),
	)
	if err != nil {
		t.Fatal(err)
	}
	var s results.Sample
	if err := p.Read(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	return s.Metrics
}

func TestAgentExportsDCGMNames(t *testing.T) {
	t.Parallel()
	used, total := uint64(3<<30), uint64(80<<30)
	dev := results.Device{
		Index:             2,
		UUID:              "GPU-abc",
		Name:              "NVIDIA H100 80GB HBM3",
		UtilPercent:       ptrF(87),
		MemUtilPercent:    ptrF(40),
		MemUsedBytes:      &used,
		MemTotalBytes:     &total,
		PowerW:            ptrF(512.5),
		TempC:             ptrF(61),
		SMClockMHz:        ptrF(1980),
		SMUtilPercent:     ptrF(74),
		DRAMBWUtilPercent: ptrF(82.5),
	} // occupancy unsupported: left out
	m := scrapeAgent(t, fixedDevices{dev})
	l := `{UUID="GPU-abc",gpu="2",modelName="NVIDIA H100 80GB HBM3"}`
	want := map[string]float64{
		"DCGM_FI_DEV_GPU_UTIL" + l: 87, "DCGM_FI_DEV_MEM_COPY_UTIL" + l: 40,
		"DCGM_FI_DEV_FB_USED" + l: 3072, "DCGM_FI_DEV_FB_FREE" + l: 77 * 1024, // MiB, as DCGM
		"DCGM_FI_DEV_POWER_USAGE" + l: 512.5, "DCGM_FI_DEV_GPU_TEMP" + l: 61, "DCGM_FI_DEV_SM_CLOCK" + l: 1980,
		"DCGM_FI_PROF_SM_ACTIVE" + l: 0.74, "DCGM_FI_PROF_DRAM_ACTIVE" + l: 0.825, // ratios, as DCGM
		"testbed_gpu_agent_read_errors_total": 0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if _, ok := m["DCGM_FI_PROF_SM_OCCUPANCY"+l]; ok {
		t.Error("unsupported occupancy exported")
	}
}

func TestAgentReadError(t *testing.T) {
	t.Parallel()
	m := scrapeAgent(t, failingSource{})
	if m["testbed_gpu_agent_read_errors_total"] != 1 {
		t.Errorf("error counter %v, want 1", m["testbed_gpu_agent_read_errors_total"])
	}
	for k := range m {
		if strings.HasPrefix(k, "DCGM_") {
			t.Errorf("%s exported from a failed reading", k)
		}
	}
	// The endpoint itself stays up (200), so the scrape records the error count.
	srv := httptest.NewServer(NewAgent(failingSource{}, time.Second))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func ptrF(v float64) *float64 { return &v }

// failingSource always fails.
type failingSource struct{}

func (failingSource) Name() string { return "broken" }
func (failingSource) Read(context.Context, *results.Sample) error {
	return errors.New("no route to exporter")
}
