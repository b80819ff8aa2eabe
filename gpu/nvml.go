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
}

type nvmlDevice struct {
	index int
	dev   nvml.Device
	uuid  string
	name  string
	// GPM: two sample buffers, swapped each reading; prev is valid once a
	// reading has filled it.
	gpm        bool
	prev, cur  nvml.GpmSample
	prevFilled bool
}

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
		d := &nvmlDevice{index: i, dev: dev}
		d.uuid, _ = dev.GetUUID()
		d.name, _ = dev.GetName()
		if c.gpm {
			n.openGPM(d)
		}
		n.devices = append(n.devices, d)
	}
	return n, nil
}

// openGPM allocates the device's GPM samples when it supports GPM.
func (n *NVML) openGPM(d *nvmlDevice) {
	sup, ret := n.lib.GpmQueryDeviceSupport(d.dev)
	if ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return
	}
	a, ret := n.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return
	}
	b, ret := n.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		_ = n.lib.GpmSampleFree(a)
		return
	}
	d.gpm = true
	d.prev = a
	d.cur = b
}

// Devices is the number of GPUs found.
func (n *NVML) Devices() int { return len(n.devices) }

// Name is "nvml".
func (n *NVML) Name() string { return "nvml" }

// Read reads every device. A figure a device does not support is left
// out; an unexpected error on one figure is listed in that device's Errors
// and the rest of the reading stands.
func (n *NVML) Read(ctx context.Context, s *results.Sample) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("NVML: closed")
	}
	s.Devices = make([]results.Device, 0, len(n.devices))
	for _, d := range n.devices {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.Devices = append(s.Devices, n.readDevice(d))
	}
	return nil
}

func (n *NVML) readDevice(d *nvmlDevice) results.Device {
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
	if d.gpm {
		n.readGPM(d, &out, check)
	}
	return out
}

// gpmMetrics are the GPM metrics read, in the order readGPM stores them.
var gpmMetrics = [...]nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
}

// readGPM takes a GPM sample and, from the second reading on, computes the
// metrics over the interval since the previous one.
func (n *NVML) readGPM(d *nvmlDevice, out *results.Device, check func(string, nvml.Return) bool) {
	if !check("gpm sample", n.lib.GpmSampleGet(d.dev, d.cur)) {
		d.prevFilled = false
		return
	}
	if d.prevFilled {
		mg := nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: d.prev, Sample2: d.cur}
		for i, id := range gpmMetrics {
			mg.Metrics[i].MetricId = uint32(id)
		}
		if check("gpm metrics", n.lib.GpmMetricsGet(&mg)) {
			dst := [...]**float64{&out.SMUtilPercent, &out.SMOccupancyPercent, &out.DRAMBWUtilPercent}
			for i := range gpmMetrics {
				if m := mg.Metrics[i]; nvml.Return(m.NvmlReturn) == nvml.SUCCESS {
					*dst[i] = ptr(m.Value)
				}
			}
		}
	}
	d.prev, d.cur = d.cur, d.prev
	d.prevFilled = true
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
		if d.gpm {
			_ = n.lib.GpmSampleFree(d.prev)
			_ = n.lib.GpmSampleFree(d.cur)
		}
	}
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: shutdown: %v", ret)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
