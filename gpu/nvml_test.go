//go:build cgo

package gpu

import (
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/serverside"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
			case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
				m.Metrics[i].Value = 33
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
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_MEM {
				return 2619, nvml.SUCCESS
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
		// Device i reports the SW power cap (0x4) when i is odd, idle (0x1) otherwise.
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return uint64(1 + 3*(i%2)), nvml.SUCCESS }
		dev.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return uint32(1000 * i), nvml.SUCCESS
			}
			return uint32(2000 * i), nvml.SUCCESS
		}
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return uint64(i), nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	var xids xidQueue
	xids.install(s)
	return s
}

// xidQueue is the mock's event set: Wait hands out queued events, then
// times out, as the driver does when nothing happened.
type xidQueue struct {
	mu     sync.Mutex
	events []nvml.EventData
	freed  bool
}

func (q *xidQueue) install(s *server.Server) {
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			q.mu.Lock()
			defer q.mu.Unlock()
			if len(q.events) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := q.events[0]
			q.events = q.events[1:]
			return e, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.freed = true
			return nvml.SUCCESS
		},
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	xidQueues.Store(s, q)
}

// xidQueues finds a mock's event queue, so a test can raise events.
var xidQueues sync.Map

func raiseXID(s *server.Server, dev int, n int) {
	q, _ := xidQueues.Load(s)
	xq := q.(*xidQueue)
	xq.mu.Lock()
	defer xq.mu.Unlock()
	for range n {
		xq.events = append(xq.events, nvml.EventData{Device: s.Devices[dev], EventType: nvml.EventTypeXidCriticalError,
			EventData: 79})
	}
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
		more := map[string]float64{"mem clock": 2619, "power limit": 700, "pcie tx": float64(1000 * i),
			"pcie rx": float64(2000 * i)}
		gotMore := map[string]*float64{"mem clock": d.MemClockMHz, "power limit": d.PowerLimitW,
			"pcie tx": d.PCIeTxKBps, "pcie rx": d.PCIeRxKBps}
		for k, w := range more {
			if gotMore[k] == nil || *gotMore[k] != w {
				t.Errorf("device %d %s = %v, want %v", i, k, gotMore[k], w)
			}
		}
		if d.ClockEventReasons == nil || *d.ClockEventReasons != uint64(1+3*(i%2)) {
			t.Errorf("device %d clock event reasons = %v", i, d.ClockEventReasons)
		}
		if d.ECCUncorrected == nil || *d.ECCUncorrected != uint64(i) || d.XIDErrors == nil || *d.XIDErrors != 0 {
			t.Errorf("device %d ECC %v, XID %v; want %d and 0", i, d.ECCUncorrected, d.XIDErrors, i)
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
		if d.TensorUtilPercent == nil || *d.TensorUtilPercent != 33 {
			t.Errorf("device %d tensor util = %v, want 33", i, d.TensorUtilPercent)
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

// TestNVMLCountsXIDEvents: XID critical errors raised between readings are
// counted on their device, cumulatively, and the event set is freed on Close.
func TestNVMLCountsXIDEvents(t *testing.T) {
	t.Parallel()
	s := h100()
	n, err := OpenNVML(WithNVMLLibrary(s), WithGPM(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		raise map[int]int // device → events raised before the reading
		want  map[int]uint64
	}{
		// Nothing happened: zero everywhere.
		{nil, map[int]uint64{0: 0, 5: 0}},
		// Two on device 5, one on device 0.
		{map[int]int{5: 2, 0: 1}, map[int]uint64{0: 1, 5: 2, 1: 0}},
		// Counts are cumulative.
		{map[int]int{5: 1}, map[int]uint64{0: 1, 5: 3}},
	} {
		for dev, k := range tc.raise {
			raiseXID(s, dev, k)
		}
		var smp results.Sample
		if err := n.Read(context.Background(), &smp); err != nil {
			t.Fatal(err)
		}
		for dev, w := range tc.want {
			if x := smp.Devices[dev].XIDErrors; x == nil || *x != w {
				t.Errorf("after raising %v: device %d XID count %v, want %d", tc.raise, dev, x, w)
			}
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	q, _ := xidQueues.Load(s)
	if !q.(*xidQueue).freed {
		t.Error("event set not freed on Close")
	}
}

// TestNVMLGPMPerReader: two readers interleaved each get GPM figures over
// their own interval. The fake's SM_UTIL is the stamp difference between
// the two samples and grows by 10 per sample taken on the device, so a
// reader whose interval spans the other's reading sees 20, not 10.
func TestNVMLGPMPerReader(t *testing.T) {
	t.Parallel()
	s := h100()
	var g fakeGPM
	g.install(s)
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	read := func(reader string) *float64 {
		var smp results.Sample
		if err := n.ReadFor(context.Background(), &smp, reader); err != nil {
			t.Fatal(err)
		}
		return smp.Devices[0].SMUtilPercent
	}
	for i, tc := range []struct {
		reader string
		want   float64 // -1: no GPM figure yet
	}{
		{"prometheus", -1}, // first reading of each reader: nothing
		{"harness", -1},
		{"prometheus", 20}, // spans the harness's reading
		{"harness", 20},
		{"harness", 10}, // back to back
	} {
		got := read(tc.reader)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("reading %d (%s): GPM %v on a first reading", i, tc.reader, *got)
		case tc.want >= 0 && (got == nil || *got != tc.want):
			t.Errorf("reading %d (%s): SM util %v, want %v", i, tc.reader, got, tc.want)
		}
	}
	// Readers beyond the bound evict the least recently used; every
	// sample allocated is freed by Close.
	for r := range maxGPMReaders + 2 {
		read(fmt.Sprint("r", r))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if g.allocs != g.frees || g.allocs != 8*2*(2+maxGPMReaders+2) {
		t.Errorf("GPM samples allocated %d, freed %d; want every one freed", g.allocs, g.frees)
	}
}

// TestAgentGPMPerScraper: two scrapers of one agent (told apart by user
// agent) each get DCGM_FI_PROF_SM_ACTIVE over their own interval.
func TestAgentGPMPerScraper(t *testing.T) {
	t.Parallel()
	s := h100()
	var g fakeGPM
	g.install(s)
	n, err := OpenNVML(WithNVMLLibrary(s))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv := httptest.NewServer(NewAgent(n, time.Second))
	defer srv.Close()
	scrape := func(ua string) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("User-Agent", ua)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "DCGM_FI_PROF_SM_ACTIVE{") && strings.Contains(line, `gpu="0"`) {
				return line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
		return ""
	}
	scrape("prometheus")
	scrape("testbed")
	// Each scraper's second interval spans the other's sample: 20, i.e. 0.2.
	if a, b := scrape("prometheus"), scrape("testbed"); a != "0.2" || b != "0.2" {
		t.Errorf("SM active %q and %q, want 0.2 each (their own intervals)", a, b)
	}
}
