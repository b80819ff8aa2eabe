package clientmon

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/net"
	"github.com/shirou/gopsutil/v4/process"
)

// runtime/metrics names read each sample.
const (
	mGoroutines = "/sched/goroutines:goroutines"
	mGCCycles   = "/gc/cycles/total:gc-cycles"
	mGCPauses   = "/sched/pauses/total/gc:seconds"
	mSchedLat   = "/sched/latencies:seconds"
)

// sampler takes Samples. It keeps the previous runtime histograms so each
// sample reports its own interval. Not safe for concurrent use.
type sampler struct {
	proc      *process.Process
	cores     float64
	sockets   bool
	start     time.Time
	rt        []metrics.Sample
	prevCyc   uint64
	prevPause *metrics.Float64Histogram
	prevSched *metrics.Float64Histogram
	lastSched histDelta // scheduler latencies of the latest interval
}

func newSampler(start time.Time, cores float64, sockets bool) (*sampler, error) {
	p, err := process.NewProcess(int32(os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("clientmon: open own process: %w", err)
	}
	s := &sampler{proc: p, cores: cores, sockets: sockets, start: start}
	s.rt = []metrics.Sample{{Name: mGoroutines}, {Name: mGCCycles}, {Name: mGCPauses}, {Name: mSchedLat}}
	// Prime the interval counters so the first real sample covers one interval.
	_, _ = p.Percent(0)
	_, _ = cpu.Percent(0, false)
	s.readRuntime()
	return s, nil
}

// readRuntime reads runtime/metrics and returns interval deltas.
func (s *sampler) readRuntime() (goroutines, cycles uint64, pause, sched histDelta) {
	metrics.Read(s.rt)
	if v := s.rt[0].Value; v.Kind() == metrics.KindUint64 {
		goroutines = v.Uint64()
	}
	if v := s.rt[1].Value; v.Kind() == metrics.KindUint64 {
		cycles = v.Uint64() - s.prevCyc
		s.prevCyc = v.Uint64()
	}
	if v := s.rt[2].Value; v.Kind() == metrics.KindFloat64Histogram {
		h := v.Float64Histogram()
		pause = delta(s.prevPause, h)
		s.prevPause = copyHist(h)
	}
	if v := s.rt[3].Value; v.Kind() == metrics.KindFloat64Histogram {
		h := v.Float64Histogram()
		sched = delta(s.prevSched, h)
		s.prevSched = copyHist(h)
	}
	return goroutines, cycles, pause, sched
}

// take observes the process now. A failing probe is named in Errors and
// leaves its field zero; the sample is still taken.
func (s *sampler) take(ctx context.Context, step string) results.ClientSample {
	now := time.Now()
	out := results.ClientSample{Kind: "sample", Time: now, T: now.Sub(s.start).Seconds(), Step: step, Cores: s.cores}
	fail := func(probe string, err error) {
		if err != nil {
			out.Errors = append(out.Errors, probe+": "+err.Error())
		}
	}
	pc, err := s.proc.PercentWithContext(ctx, 0)
	fail("process_cpu", err)
	out.CPU = round2(pc)
	out.CPUOf = round2(pc / s.cores)
	hc, err := cpu.PercentWithContext(ctx, 0, false)
	fail("host_cpu", err)
	if len(hc) > 0 {
		out.Host = round2(hc[0])
	}
	if mi, err := s.proc.MemoryInfoWithContext(ctx); err == nil {
		out.RSS = mi.RSS
	} else {
		fail("memory", err)
	}
	out.Thread, err = s.proc.NumThreadsWithContext(ctx)
	fail("threads", err)
	out.FDs, err = s.proc.NumFDsWithContext(ctx)
	fail("fds", err)
	if s.sockets {
		conns, err := net.ConnectionsPidWithContext(ctx, "inet", s.proc.Pid)
		fail("sockets", err)
		out.Socket = len(conns)
	}
	g, cyc, pause, sched := s.readRuntime()
	out.Goroutines, out.GCCycles = g, cyc
	s.lastSched = sched
	out.GCPauseMaxMS = round3(pause.max() * 1e3)
	out.SchedLatencyP99MS = round3(sched.quantile(0.99) * 1e3)
	return out
}

// histDelta is the part of a runtime histogram observed in one interval.
type histDelta struct {
	counts  []uint64
	buckets []float64 // len(counts)+1 boundaries
}

func copyHist(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{
		Counts:  append([]uint64(nil), h.Counts...),
		Buckets: h.Buckets, // boundaries never change for a metric
	}
}

// delta subtracts prev from cur (prev may be nil: everything so far).
func delta(prev, cur *metrics.Float64Histogram) histDelta {
	d := histDelta{counts: make([]uint64, len(cur.Counts)), buckets: cur.Buckets}
	for i, c := range cur.Counts {
		if prev != nil && i < len(prev.Counts) {
			c -= prev.Counts[i]
		}
		d.counts[i] = c
	}
	return d
}

func (d histDelta) merge(o histDelta) histDelta {
	if d.counts == nil {
		return histDelta{counts: append([]uint64(nil), o.counts...), buckets: o.buckets}
	}
	for i := range d.counts {
		if i < len(o.counts) {
			d.counts[i] += o.counts[i]
		}
	}
	return d
}

func (d histDelta) total() uint64 {
	var n uint64
	for _, c := range d.counts {
		n += c
	}
	return n
}

// quantile returns the lower boundary of the bucket holding quantile q: a
// value the q-th observation certainly reached. The runtime's buckets are a
// few percent wide, so this understates by at most that much and never
// raises a false alarm.
func (d histDelta) quantile(q float64) float64 {
	n := d.total()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range d.counts {
		seen += c
		if seen >= rank {
			return finite(d.buckets[i])
		}
	}
	return 0
}

// max returns the lower boundary of the highest non-empty bucket.
func (d histDelta) max() float64 {
	for i := len(d.counts) - 1; i >= 0; i-- {
		if d.counts[i] > 0 {
			return finite(d.buckets[i])
		}
	}
	return 0
}

func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
