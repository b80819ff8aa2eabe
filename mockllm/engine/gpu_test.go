package engine

import (
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestActivityWindow(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	type step struct {
		start, end int64
		compute    float64
	}
	for _, tc := range []struct {
		name          string
		steps         []step
		now           int64
		busy, compute float64
	}{
		// Nothing ran: idle.
		{"idle", nil, 600 * ms, 0, 0},
		// Busy the whole window, a fifth of it per-token work.
		{"saturated", []step{{0, 600 * ms, 0.2}}, 600 * ms, 1, 0.2},
		// The window is the current bucket and the 19 before it: at 600 ms,
		// [125 ms, 600 ms), so 100 ms busy is 100/475 of it.
		{"partial", []step{{400 * ms, 500 * ms, 0}}, 600 * ms, 100.0 / 475, 0},
		// A step that ended before the window does not count.
		{"old", []step{{0, 50 * ms, 1}}, 1000 * ms, 0, 0},
		// Early in the run the window is only as long as the run.
		{"young", []step{{0, 50 * ms, 0.5}}, 100 * ms, 0.5, 0.25},
		// Two steps in one bucket add up.
		{"same bucket", []step{{500 * ms, 510 * ms, 0}, {510 * ms, 520 * ms, 1}}, 525 * ms, 20.0 / 475, 10.0 / 475},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newActivity()
			for _, s := range tc.steps {
				a.add(s.start, s.end, s.compute)
			}
			busy, compute := a.window(tc.now)
			if math.Abs(busy-tc.busy) > 1e-6 || math.Abs(compute-tc.compute) > 1e-6 {
				t.Errorf("window = (%.4f, %.4f), want (%.4f, %.4f)", busy, compute, tc.busy, tc.compute)
			}
		})
	}
}

func TestActivityAllocationFree(t *testing.T) {
	a := newActivity()
	var end int64
	allocs := testing.AllocsPerRun(100, func() {
		a.add(end, end+8_000_000, 0.1)
		end += 8_000_000
		a.window(end)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per step, want 0", allocs)
	}
}

func TestGPUStateModel(t *testing.T) {
	t.Parallel()
	g := DefaultGPU
	for _, tc := range []struct {
		name                   string
		busy, compute, kvBytes float64
		check                  func(GPUState) string
	}{
		// Idle: idle power, weights resident.
		{"idle", 0, 0, 0, func(s GPUState) string {
			if s.PowerW != g.IdleW || s.FBUsedBytes != 16<<30 || s.Util != 0 {
				return "idle GPU should draw idle power with only the weights resident"
			}
			return ""
		}},
		// Weight-bound decode: DRAM busier than the SMs.
		{"memory-bound", 1, 0.05, 0, func(s GPUState) string {
			if s.DRAMActive <= s.SMActive {
				return "a step dominated by β0 should keep DRAM busier than the SMs"
			}
			return ""
		}},
		// Per-token work dominates: SMs busier than DRAM, power near the limit.
		{"compute-bound", 1, 0.9, 0, func(s GPUState) string {
			if s.SMActive < 0.9 || s.SMActive <= s.DRAMActive || s.PowerW < 0.6*g.MaxW {
				return "a step dominated by per-token work should keep the SMs busy and draw power"
			}
			return ""
		}},
		// KV beyond the framebuffer is capped.
		{"capped", 1, 0, 1 << 40, func(s GPUState) string {
			if s.FBUsedBytes != s.FBTotalBytes {
				return "framebuffer used must not exceed its total"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := gpuState(g, tc.busy, tc.compute, tc.kvBytes)
			if msg := tc.check(s); msg != "" {
				t.Errorf("%s: %+v", msg, s)
			}
			if s.PowerW > s.PowerLimitW || s.SMActive > 1 || s.DRAMActive > 1 {
				t.Errorf("out of range: %+v", s)
			}
		})
	}
}

// TestSchedulerGPU: a saturated engine reports full utilisation and its
// allocated KV blocks as framebuffer; once idle for a window, nothing.
func TestSchedulerGPU(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := testProfile()
		s := newEngine(t, p)
		st := start(t, s, 160, 1000)
		time.Sleep(300 * time.Millisecond)
		g := s.(GPUReporter).GPU()
		if g.Util < 0.99 {
			t.Errorf("util %.3f while a request decodes, want ~1", g.Util)
		}
		// 160 + ~300 tokens → about 29 blocks of 16 tokens × 128 KiB.
		kv := g.FBUsedBytes - 16<<30
		if blocks := kv / (16 * kvBytesPerToken); blocks < 10 || blocks > 40 {
			t.Errorf("KV in framebuffer = %.1f blocks, want the sequence's ~29", blocks)
		}
		drain(t, st, time.Now())
		time.Sleep(2 * ActivityWindow)
		if g := s.(GPUReporter).GPU(); g.Util != 0 || g.PowerW != DefaultGPU.IdleW {
			t.Errorf("idle engine: %+v", g)
		}
	})
}

func TestGPUModelValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		// Weights larger than the memory.
		{"weights", "gpu: {memory_gib: 24, weights_gib: 40}", "gpu.weights_gib"},
		// Negative power.
		{"negative", "gpu: {max_w: -1}", "gpu.max_w"},
		// Idle above the limit.
		{"idle", "gpu: {idle_w: 500, max_w: 300}", "gpu.idle_w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseProfile([]byte("base: llama3-8b-h100\n" + tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	p, err := ParseProfile([]byte("base: llama3-8b-h100\ngpu: {memory_gib: 40, max_w: 400}"))
	if err != nil || p.GPU.MemoryGiB != 40 || p.GPU.withDefaults().IdleW != DefaultGPU.IdleW {
		t.Errorf("partial gpu section: %+v, %v", p.GPU, err)
	}
}
