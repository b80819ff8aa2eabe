package engine

import (
	"fmt"
	"math"
	"sync"
)

// GPUModel describes the GPU the engine-mode mock pretends to run on, so
// the mock can expose DCGM-named gauges derived from its own steps (see
// GPUReporter). Zero fields take DefaultGPU's values; the defaults are an
// H100 SXM 80 GB serving Llama-3.1-8B in bf16 (docs/saturation.md gives the
// sources). In YAML it is the profile's `gpu:` section.
type GPUModel struct {
	// MemoryGiB is the framebuffer's size.
	MemoryGiB float64 `yaml:"memory_gib,omitempty"`
	// WeightsGiB is resident from the start: the model's weights.
	WeightsGiB float64 `yaml:"weights_gib,omitempty"`
	// KVBytesPerToken is one token's KV cache across all layers; allocated
	// KV blocks count as framebuffer used.
	KVBytesPerToken float64 `yaml:"kv_bytes_per_token,omitempty"`
	// IdleW and MaxW bound the power model; MaxW is also the power limit.
	IdleW float64 `yaml:"idle_w,omitempty"`
	MaxW  float64 `yaml:"max_w,omitempty"`
	// SMClockMHz and MemClockMHz are the (constant) clocks reported.
	SMClockMHz  float64 `yaml:"sm_clock_mhz,omitempty"`
	MemClockMHz float64 `yaml:"mem_clock_mhz,omitempty"`
}

// DefaultGPU is an H100 SXM 80 GB (700 W, 1980 MHz boost, HBM3 at 2619 MHz)
// holding Llama-3.1-8B's 16 GiB of bf16 weights, 128 KiB of KV per token.
var DefaultGPU = GPUModel{
	MemoryGiB:       80,
	WeightsGiB:      16,
	KVBytesPerToken: kvBytesPerToken,
	IdleW:           70,
	MaxW:            700,
	SMClockMHz:      1980,
	MemClockMHz:     2619,
}

// withDefaults fills g's zero fields from DefaultGPU.
func (g GPUModel) withDefaults() GPUModel {
	fill := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	fill(&g.MemoryGiB, DefaultGPU.MemoryGiB)
	fill(&g.WeightsGiB, DefaultGPU.WeightsGiB)
	fill(&g.KVBytesPerToken, DefaultGPU.KVBytesPerToken)
	fill(&g.IdleW, DefaultGPU.IdleW)
	fill(&g.MaxW, DefaultGPU.MaxW)
	fill(&g.SMClockMHz, DefaultGPU.SMClockMHz)
	fill(&g.MemClockMHz, DefaultGPU.MemClockMHz)
	return g
}

// validate checks the model after defaults: finite, non-negative, weights
// inside the memory, idle power below the limit.
func (g GPUModel) validate() error {
	g = g.withDefaults()
	for _, f := range []struct {
		name string
		v    float64
	}{{"memory_gib", g.MemoryGiB}, {"weights_gib", g.WeightsGiB}, {"kv_bytes_per_token", g.KVBytesPerToken},
		{"idle_w", g.IdleW}, {"max_w", g.MaxW}, {"sm_clock_mhz", g.SMClockMHz}, {"mem_clock_mhz", g.MemClockMHz}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("profile: gpu.%s: must be >= 0 and finite, got %v", f.name, f.v)
		}
	}
	if g.WeightsGiB > g.MemoryGiB {
		return fmt.Errorf("profile: gpu.weights_gib: must fit gpu.memory_gib (%v), got %v", g.MemoryGiB, g.WeightsGiB)
	}
	if g.IdleW > g.MaxW {
		return fmt.Errorf("profile: gpu.idle_w: must be <= gpu.max_w (%v), got %v", g.MaxW, g.IdleW)
	}
	return nil
}

// GPUState is the mock GPU's state over the last ActivityWindow, in the
// units DCGM reports.
type GPUState struct {
	// Util is the share of the window in which a step ran (NVML's "a kernel
	// was running"), 0..1.
	Util float64
	// SMActive, SMOccupancy and DRAMActive are DCGM profiling ratios, 0..1.
	SMActive    float64
	SMOccupancy float64
	DRAMActive  float64
	// FBUsedBytes is weights plus the allocated KV blocks, capped at FBTotalBytes.
	FBUsedBytes  float64
	FBTotalBytes float64
	PowerW       float64
	PowerLimitW  float64
	SMClockMHz   float64
	MemClockMHz  float64
}

// GPUReporter is implemented by schedulers that model a GPU (engine mode).
type GPUReporter interface {
	GPU() GPUState
}

// Activity window: buckets of activityBucketNS, activityBuckets of them.
// 500 ms is within NVML's utilisation sample period range (1/6 s to 1 s)
// and short enough that a ladder step of a second or two is resolved.
const (
	activityBuckets  = 20
	activityBucketNS = 25_000_000
	// ActivityWindow is the span GPUState's ratios cover.
	ActivityWindow = activityBuckets * activityBucketNS
)

// activity accumulates busy and per-token ("compute") step time into a
// ring of time buckets; it never allocates, so the step loop may feed it.
type activity struct {
	mu      sync.Mutex
	busy    [activityBuckets]int64
	compute [activityBuckets]int64
	stamp   [activityBuckets]int64 // bucket number the slot holds; -1 empty
}

func newActivity() *activity {
	a := &activity{}
	for i := range a.stamp {
		a.stamp[i] = -1
	}
	return a
}

// add records a step over [start, end) ns of which share computeShare was
// per-token work (the rest, β0, the fixed cost of reading the weights).
func (a *activity) add(start, end int64, computeShare float64) {
	if end <= start {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	first := max(start/activityBucketNS, (end-1)/activityBucketNS-activityBuckets+1)
	for b := first; b <= (end-1)/activityBucketNS; b++ {
		lo := max(start, b*activityBucketNS)
		hi := min(end, (b+1)*activityBucketNS)
		i := b % activityBuckets
		if a.stamp[i] != b {
			a.stamp[i] = b
			a.busy[i] = 0
			a.compute[i] = 0
		}
		a.busy[i] += hi - lo
		a.compute[i] += int64(float64(hi-lo) * computeShare)
	}
}

// window returns the busy and compute shares of the window ending at now.
func (a *activity) window(now int64) (busy, compute float64) {
	if now <= 0 {
		return 0, 0
	}
	cur := now / activityBucketNS
	from := max(cur-activityBuckets+1, 0)
	span := now - from*activityBucketNS
	var b, c int64
	a.mu.Lock()
	for k := from; k <= cur; k++ {
		i := k % activityBuckets
		if a.stamp[i] == k {
			b += a.busy[i]
			c += a.compute[i]
		}
	}
	a.mu.Unlock()
	busy = min(float64(b)/float64(span), 1)
	compute = min(float64(c)/float64(span), busy)
	return busy, compute
}

// gpuState turns activity shares and KV use into DCGM figures. The SM is
// taken as active for all per-token work and 30 % of the fixed part; DRAM
// as busy for 85 % of the fixed part (weights stream through once per step)
// and 35 % of per-token work; occupancy as half of SM activity; power as
// idle plus the dynamic range weighted 60/40 by SM and DRAM activity.
func gpuState(g GPUModel, busy, compute, kvBytes float64) GPUState {
	fixed := busy - compute
	s := GPUState{
		Util:         busy,
		SMActive:     compute + 0.3*fixed,
		DRAMActive:   0.85*fixed + 0.35*compute,
		FBTotalBytes: g.MemoryGiB * (1 << 30),
		PowerLimitW:  g.MaxW,
		SMClockMHz:   g.SMClockMHz,
		MemClockMHz:  g.MemClockMHz,
	}
	s.SMOccupancy = 0.5 * s.SMActive
	s.FBUsedBytes = min(g.WeightsGiB*(1<<30)+kvBytes, s.FBTotalBytes)
	s.PowerW = g.IdleW + (g.MaxW-g.IdleW)*(0.6*s.SMActive+0.4*s.DRAMActive)
	return s
}
