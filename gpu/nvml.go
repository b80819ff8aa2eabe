//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/llm-testbed/testbed/harness/results"
)

// NVMLOption configures OpenNVML.
type NVMLOption func(*nvmlConfig)

type nvmlConfig struct {
	lib nvml.Interface
	gpm bool
}

// WithNVMLLibrary uses lib instead of the system's libnvidia-ml (tests pass
// a go-nvml mock such as mock/dgxh100).
func WithNVMLLibrary(lib nvml.Interface) NVMLOption {
	return func(c *nvmlConfig) { c.lib = lib }
}

// WithGPM turns GPM metrics on or off (default on, where the device
// supports them).
func WithGPM(on bool) NVMLOption { return func(c *nvmlConfig) { c.gpm = on } }

// NVML is a Source reading every local GPU through NVML. Open it with
// OpenNVML and Close it when done.
type NVML struct {
	lib     nvml.Interface
	devices []*nvmlDevice
	mu      sync.Mutex // a Sampler never overlaps reads; Close may race one
	closed  bool
	// events receives the devices' XID critical errors, polled on each
	// reading; nil where the driver offers no event set.
	events nvml.EventSet
	tick   uint64 // readings so far: the GPM states' recency
}

type nvmlDevice struct {
	index int
	dev   nvml.Device
	uuid  string
	name  string
	// gpm: the device supports GPM; states holds one pair of sample
	// buffers per reader (scraper), so two readers do not split each
	// other's intervals.
	gpm    bool
	states map[string]*gpmState
	// xid counts XID critical-error events since open; xidOn: registered.
	xid   uint64
	xidOn bool
}

// gpmState is one reader's two GPM sample buffers, swapped each reading;
// prev is valid once a reading has filled it.
type gpmState struct {
	prev, cur  nvml.GpmSample
	prevFilled bool
	used       uint64 // NVML.tick of its last reading
}

// maxGPMReaders bounds the GPM states kept per device; the least recently
// used one is freed for a new reader.
const maxGPMReaders = 8

// OpenNVML initialises NVML and finds the GPUs. Without the library (no
// driver, or a build without cgo) it returns an error starting "NVML not
// available"; no other NVML call is made after a failed Init, since those
// abort the process.
func OpenNVML(opts ...NVMLOption) (*NVML, error) {
	c := nvmlConfig{gpm: true}
	for _, o := range opts {
		o(&c)
	}
	if c.lib == nil {
		c.lib = nvml.New()
	}
	if ret := c.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML not available: init: %v", ret)
	}
	n := &NVML{lib: c.lib}
	count, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		_ = c.lib.Shutdown()
		return nil, fmt.Errorf("NVML: device count: %v", ret)
	}
	for i := range count {
		dev, ret := c.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			n.Close()
			return nil, fmt.Errorf("NVML: device %d: %v", i, ret)
		}
		d := &nvmlDevice{index: i, dev: dev, states: map[string]*gpmState{}}
		d.uuid, _ = dev.GetUUID()
		d.name, _ = dev.GetName()
		if c.gpm {
			sup, ret := c.lib.GpmQueryDeviceSupport(dev)
			d.gpm = ret == nvml.SUCCESS && sup.IsSupportedDevice != 0
		}
		n.devices = append(n.devices, d)
	}
	n.openEvents()
	return n, nil
}

// openEvents registers every device for XID critical errors, where the
// driver supports it; a device that refuses simply reports no count.
func (n *NVML) openEvents() {
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return
	}
	any := false
	for _, d := range n.devices {
		if d.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			d.xidOn = true
			any = true
		}
	}
	if !any {
		_ = set.Free()
		return
	}
	n.events = set
}

// pollEvents counts the XID events waiting in the set, without blocking.
func (n *NVML) pollEvents() {
	if n.events == nil {
		return
	}
	for range 1024 { // bounded: a storm of events cannot hold the reading
		e, ret := n.events.Wait(0)
		if ret != nvml.SUCCESS {
			return
		}
		if e.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		for _, d := range n.devices {
			if d.dev == e.Device {
				d.xid++
			}
		}
	}
}

// gpmFor returns reader's GPM state on d, allocating it (and freeing the
// least recently used one beyond maxGPMReaders); nil when allocation fails.
func (n *NVML) gpmFor(d *nvmlDevice, reader string) *gpmState {
	if st := d.states[reader]; st != nil {
		return st
	}
	if len(d.states) >= maxGPMReaders {
		oldest := ""
		for k, st := range d.states {
			if oldest == "" || st.used < d.states[oldest].used {
				oldest = k
			}
		}
		n.freeGPM(d.states[oldest])
		delete(d.states, oldest)
	}
	a, ret := n.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return nil
	}
	b, ret := n.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		_ = n.lib.GpmSampleFree(a)
		return nil
	}
	st := &gpmState{prev: a, cur: b}
	d.states[reader] = st
	return st
}

func (n *NVML) freeGPM(st *gpmState) {
	_ = n.lib.GpmSampleFree(st.prev)
	_ = n.lib.GpmSampleFree(st.cur)
}

// Devices is the number of GPUs found.
func (n *NVML) Devices() int { return len(n.devices) }

// Name is "nvml".
func (n *NVML) Name() string { return "nvml" }

// Read reads every device. A figure a device does not support is left
// out; an unexpected error on one figure is listed in that device's Errors
// and the rest of the reading stands. GPM figures cover the interval since
// the previous Read.
func (n *NVML) Read(ctx context.Context, s *results.Sample) error { return n.ReadFor(ctx, s, "") }

// ReadFor is Read on behalf of one reader (a scraper of the gpu agent):
// its GPM figures cover the interval since that reader's previous reading,
// whoever else read in between.
func (n *NVML) ReadFor(ctx context.Context, s *results.Sample, reader string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("NVML: closed")
	}
	n.tick++
	n.pollEvents()
	s.Devices = make([]results.Device, 0, len(n.devices))
	for _, d := range n.devices {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.Devices = append(s.Devices, n.readDevice(d, reader))
	}
	return nil
}

func (n *NVML) readDevice(d *nvmlDevice, reader string) results.Device {
	out := results.Device{Index: d.index, UUID: d.uuid, Name: d.name}
	check := func(what string, ret nvml.Return) bool {
		switch ret {
		case nvml.SUCCESS:
			return true
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			out.Errors = append(out.Errors, what+": "+ret.Error())
		}
		return false
	}
	if u, ret := d.dev.GetUtilizationRates(); check("utilization", ret) {
		out.UtilPercent, out.MemUtilPercent = ptr(float64(u.Gpu)), ptr(float64(u.Memory))
	}
	if m, ret := d.dev.GetMemoryInfo(); check("memory", ret) {
		out.MemUsedBytes, out.MemTotalBytes = ptr(m.Used), ptr(m.Total)
	}
	if mw, ret := d.dev.GetPowerUsage(); check("power", ret) {
		out.PowerW = ptr(float64(mw) / 1000)
	}
	if t, ret := d.dev.GetTemperature(nvml.TEMPERATURE_GPU); check("temperature", ret) {
		out.TempC = ptr(float64(t))
	}
	if c, ret := d.dev.GetClockInfo(nvml.CLOCK_SM); check("sm clock", ret) {
		out.SMClockMHz = ptr(float64(c))
	}
	n.readMore(d, &out, check)
	if d.gpm {
		if st := n.gpmFor(d, reader); st != nil {
			st.used = n.tick
			n.readGPM(d, st, &out, check)
		}
	}
	return out
}

// readMore reads the figures that explain saturation and faults: memory
// clock, power limit, clock-event reasons, PCIe throughput, ECC and XID.
func (n *NVML) readMore(d *nvmlDevice, out *results.Device, check func(string, nvml.Return) bool) {
	if c, ret := d.dev.GetClockInfo(nvml.CLOCK_MEM); check("mem clock", ret) {
		out.MemClockMHz = ptr(float64(c))
	}
	if mw, ret := d.dev.GetEnforcedPowerLimit(); check("power limit", ret) {
		out.PowerLimitW = ptr(float64(mw) / 1000)
	}
	if r, ret := d.dev.GetCurrentClocksEventReasons(); check("clock event reasons", ret) {
		out.ClockEventReasons = ptr(r)
	}
	if kb, ret := d.dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); check("pcie tx", ret) {
		out.PCIeTxKBps = ptr(float64(kb))
	}
	if kb, ret := d.dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); check("pcie rx", ret) {
		out.PCIeRxKBps = ptr(float64(kb))
	}
	if e, ret := d.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		out.ECCUncorrected = ptr(e)
	}
	if d.xidOn {
		out.XIDErrors = ptr(d.xid)
	}
}

// gpmMetrics are the GPM metrics read, in the order readGPM stores them.
var gpmMetrics = [...]nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL,
}

// readGPM takes a GPM sample and, from the second reading on, computes the
// metrics over the interval since the previous one.
func (n *NVML) readGPM(d *nvmlDevice, st *gpmState, out *results.Device, check func(string, nvml.Return) bool) {
	if !check("gpm sample", n.lib.GpmSampleGet(d.dev, st.cur)) {
		st.prevFilled = false
		return
	}
	if st.prevFilled {
		mg := nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: st.prev, Sample2: st.cur}
		for i, id := range gpmMetrics {
			mg.Metrics[i].MetricId = uint32(id)
		}
		if check("gpm metrics", n.lib.GpmMetricsGet(&mg)) {
			dst := [...]**float64{&out.SMUtilPercent, &out.SMOccupancyPercent, &out.DRAMBWUtilPercent,
				&out.TensorUtilPercent}
			for i := range gpmMetrics {
				if m := mg.Metrics[i]; nvml.Return(m.NvmlReturn) == nvml.SUCCESS {
					*dst[i] = ptr(m.Value)
				}
			}
		}
	}
	st.prev, st.cur = st.cur, st.prev
	st.prevFilled = true
}

// Close frees the GPM samples and shuts NVML down. It is safe to call twice.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	for _, d := range n.devices {
		for _, st := range d.states {
			n.freeGPM(st)
		}
	}
	if n.events != nil {
		_ = n.events.Free()
	}
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: shutdown: %v", ret)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
