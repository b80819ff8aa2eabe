//go:build cgo

package gpu

import (
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"

	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fakeGPM gives a dgxh100 mock GPM support: each GpmSampleGet stamps the
// sample with a per-device counter that grows by 10 per call, and
// GpmMetricsGet answers SM_UTIL = Sample2 − Sample1 stamps (so a test can
// tell that the sampler passes previous then current), SM_OCCUPANCY = 40 and
// DRAM_BW_UTIL = 55.5.
type fakeGPM struct {
	mu      sync.Mutex
	stamp   map[nvml.GpmSample]float64
	counter map[nvml.Device]float64
	allocs  int
	frees   int
}

func (g *fakeGPM) install(s *server.Server) {
	g.stamp, g.counter = map[nvml.GpmSample]float64{}, map[nvml.Device]float64{}
	s.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) {
		return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
	}
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.allocs++
		return &mock.GpmSample{}, nvml.SUCCESS
	}
	s.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.frees++
		return nvml.SUCCESS
	}
	s.GpmSampleGetFunc = func(d nvml.Device, smp nvml.GpmSample) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.counter[d] += 10
		g.stamp[smp] = g.counter[d]
		return nvml.SUCCESS
	}
	s.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i := range m.NumMetrics {
			switch nvml.GpmMetricId(m.Metrics[i].MetricId) {
			case nvml.GPM_METRIC_SM_UTIL:
				m.Metrics[i].Value = g.stamp[m.Sample2] - g.stamp[m.Sample1]
			case nvml.GPM_METRIC_SM_OCCUPANCY:
				m.Metrics[i].Value = 40
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				m.Metrics[i].Value = 55.5
			default:
				m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
}

// h100 returns a DGX H100 mock whose device i reports utilisation 10·i %,
// memory used i GiB, power 100+i W (in mW), 50+i °C and SM clock 1980 MHz.
func h100() *server.Server {
	s := dgxh100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.MemoryInfo.Used = uint64(i) << 30
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(i)}, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100_000 + 1000*i), nvml.SUCCESS }
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(50 + i), nvml.SUCCESS }
		dev.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
	}
	return s
}

func TestNVMLReadsEveryFigure(t *testing.T) {
	t.Parallel()
	s := h100()
	var g fakeGPM
	g.install(s)
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	if n.Devices() != 8 {
		t.Fatalf("devices = %d, want the 8 of a DGX H100", n.Devices())
	}
	var first, second results.Sample
	if err := n.Read(context.Background(), &first); err != nil {
		t.Fatal(err)
	}
	if err := n.Read(context.Background(), &second); err != nil {
		t.Fatal(err)
	}
	for i, d := range first.Devices {
		if d.Index != i || !strings.HasPrefix(d.UUID, "GPU-") || !strings.Contains(d.Name, "H100") {
			t.Errorf("device %d identity = %d %q %q", i, d.Index, d.UUID, d.Name)
		}
		want := map[string]float64{"util": float64(10 * i), "memutil": float64(i), "used": float64(uint64(i) << 30),
			"total": 80 << 30, "power": 100 + float64(i), "temp": 50 + float64(i), "clock": 1980}
		got := map[string]*float64{
			"util":    d.UtilPercent,
			"memutil": d.MemUtilPercent,
			"power":   d.PowerW,
			"temp":    d.TempC,
			"clock":   d.SMClockMHz,
		}
		if d.MemUsedBytes != nil && d.MemTotalBytes != nil {
			got["used"], got["total"] = ptr(float64(*d.MemUsedBytes)), ptr(float64(*d.MemTotalBytes))
		}
		for k, w := range want {
			if got[k] == nil || *got[k] != w {
				t.Errorf("device %d %s = %v, want %v", i, k, got[k], w)
			}
		}
		// GPM needs two samples: nothing on the first reading.
		if d.SMUtilPercent != nil || d.DRAMBWUtilPercent != nil {
			t.Errorf("device %d: GPM figures on the first reading", i)
		}
		if len(d.Errors) != 0 {
			t.Errorf("device %d errors: %v", i, d.Errors)
		}
	}
	for i, d := range second.Devices {
		// The stamp grows by 10 per sample: previous→current is +10; a
		// swapped pair would give −10.
		if d.SMUtilPercent == nil || *d.SMUtilPercent != 10 {
			t.Errorf("device %d SM util = %v, want 10 (current minus previous sample)", i, d.SMUtilPercent)
		}
		if d.SMOccupancyPercent == nil || *d.SMOccupancyPercent != 40 || d.DRAMBWUtilPercent == nil ||
			*d.DRAMBWUtilPercent != 55.5 {
			t.Errorf("device %d occupancy/DRAM = %v/%v, want 40/55.5", i, d.SMOccupancyPercent, d.DRAMBWUtilPercent)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if g.allocs != 16 || g.frees != 16 {
		t.Errorf("GPM samples allocated %d, freed %d; want 16 and 16", g.allocs, g.frees)
	}
	if err := n.Read(context.Background(), &results.Sample{}); err == nil {
		t.Error("Read after Close succeeded")
	}
}

func TestNVMLUnsupportedAndFailingFigures(t *testing.T) {
	t.Parallel()
	s := h100()
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		// An unsupported figure is absent, not an error.
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		// An unexpected failure is listed, and the other figures stand.
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	}
	// GPM unsupported: no samples allocated, no GPM figures.
	s.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) {
		return nvml.GpmSupport{IsSupportedDevice: 0}, nvml.SUCCESS
	}
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for range 2 {
		var smp results.Sample
		if err := n.Read(context.Background(), &smp); err != nil {
			t.Fatal(err)
		}
		for _, d := range smp.Devices {
			if d.PowerW != nil || d.TempC != nil || d.SMUtilPercent != nil {
				t.Errorf(
					"device %d: power %v temp %v sm util %v, want all absent",
					d.Index,
					d.PowerW,
					d.TempC,
					d.SMUtilPercent,
				)
			}
			if d.UtilPercent == nil || d.SMClockMHz == nil {
				t.Errorf("device %d lost its supported figures", d.Index)
			}
			if len(d.Errors) != 1 || !strings.Contains(d.Errors[0], "temperature") ||
				!strings.Contains(d.Errors[0], "GPU_IS_LOST") {
				t.Errorf("device %d errors = %v, want the temperature failure only", d.Index, d.Errors)
			}
		}
	}
}

func TestOpenNVMLInitFailureMakesNoOtherCall(t *testing.T) {
	t.Parallel()
	// Every method but Init is nil: the mock panics if OpenNVML makes any
	// other call, as the real library would abort the process.
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	n, err := OpenNVML(WithNVMLLibrary(lib))
	if n != nil || err == nil {
		t.Fatalf("OpenNVML = %v, %v; want an error", n, err)
	}
	if !strings.HasPrefix(err.Error(), "NVML not available") || !strings.Contains(err.Error(), "LIBRARY_NOT_FOUND") {
		t.Errorf("error %q does not say NVML is unavailable and why", err)
	}
	if len(lib.InitCalls()) != 1 {
		t.Errorf("Init called %d times", len(lib.InitCalls()))
	}
}

// TestOpenNVMLSystem opens the real library: on a machine without an NVIDIA
// driver it must fail cleanly (not abort); on a GPU host it must find a GPU.
func TestOpenNVMLSystem(t *testing.T) {
	t.Parallel()
	n, err := OpenNVML()
	if err != nil {
		if !strings.HasPrefix(err.Error(), "NVML not available") {
			t.Fatalf("error %q does not start with \"NVML not available\"", err)
		}
		t.Logf("no NVML here: %v", err)
		return
	}
	defer n.Close()
	var smp results.Sample
	if err := n.Read(context.Background(), &smp); err != nil {
		t.Fatal(err)
	}
	if len(smp.Devices) == 0 || smp.Devices[0].MemTotalBytes == nil {
		t.Fatalf("NVML opened but read %+v", smp.Devices)
	}
	t.Logf("NVML: %d devices, first %s", len(smp.Devices), smp.Devices[0].Name)
}

func TestSamplerWithNVML(t *testing.T) {
	t.Parallel()
	s := h100()
	var g fakeGPM
	g.install(s)
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var buf bytes.Buffer
	start := time.Now()
	sm, err := serverside.NewSampler(
		start,
		[]serverside.Source{n},
		serverside.WithInterval(10*time.Millisecond),
		serverside.WithOutput(&buf),
	)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); sm.Stats().Samples < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := sm.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := results.DecodeSamples(&buf)
	if err != nil {
		t.Fatal(err)
	}
	st := sm.Stats()
	if int64(len(got)) != st.Written || st.Written != st.Samples || len(got) < 4 {
		t.Fatalf("%d lines, stats %+v; want every reading written and at least 4", len(got), st)
	}
	gpm := 0
	for _, smp := range got {
		if smp.Source != "nvml" || len(smp.Devices) != 8 || smp.Error != "" {
			t.Fatalf("sample %+v", smp)
		}
		if smp.Devices[0].SMUtilPercent != nil {
			gpm++
		}
	}
	if gpm != len(got)-1 {
		t.Errorf("%d of %d samples carry GPM figures, want all but the first", gpm, len(got))
	}
	if !errors.Is(sm.Stop(), nil) {
		t.Error("second Stop returned an error")
	}
}

// TestAgentOverNVMLMock: the agent in front of a DGX H100 mock, scraped
// twice; GPM ratios appear from the second scrape.
func TestAgentOverNVMLMock(t *testing.T) {
	t.Parallel()
	s := h100()
	var g fakeGPM
	g.install(s)
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	first := scrapeAgent(t, n)
	second := scrapeAgent(t, n)
	uuid := s.Devices[3].(*server.Device).UUID
	l := `{UUID="` + uuid + `",gpu="3",modelName="NVIDIA H100 80GB HBM3"}`
	if first["DCGM_FI_DEV_GPU_UTIL"+l] != 30 || first["DCGM_FI_DEV_FB_USED"+l] != 3072 ||
		first["DCGM_FI_DEV_POWER_USAGE"+l] != 103 {
		t.Errorf(
			"device 3 first scrape: util %v, fb %v, power %v; want 30, 3072, 103",
			first["DCGM_FI_DEV_GPU_UTIL"+l],
			first["DCGM_FI_DEV_FB_USED"+l],
			first["DCGM_FI_DEV_POWER_USAGE"+l],
		)
	}
	if _, ok := first["DCGM_FI_PROF_SM_ACTIVE"+l]; ok {
		t.Error("GPM ratio on the first scrape")
	}
	if second["DCGM_FI_PROF_SM_ACTIVE"+l] != 0.1 || second["DCGM_FI_PROF_DRAM_ACTIVE"+l] != 0.555 {
		t.Errorf(
			"second scrape SM active %v, DRAM %v; want 0.1, 0.555",
			second["DCGM_FI_PROF_SM_ACTIVE"+l],
			second["DCGM_FI_PROF_DRAM_ACTIVE"+l],
		)
	}
}
