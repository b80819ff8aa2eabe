package analysis

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
)

// Window is a step's measured window on the run's clock, in ns since the
// run's start: first intended send to last completion of its measured
// (non-warm-up) requests, as histograms.jsonl writes it.
type Window struct {
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
}

// WindowsFromRecords derives each step's measured window from its records,
// the same way the run's writer does for histograms.jsonl.
func WindowsFromRecords(recs []results.Record) map[int]Window {
	out := map[int]Window{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			continue
		}
		w, ok := out[r.Step]
		if !ok || r.IntendedNS < w.StartNS {
			w.StartNS = r.IntendedNS
		}
		w.EndNS = max(w.EndNS, r.DoneNS)
		out[r.Step] = w
	}
	return out
}

// WindowsFromHistograms reads the windows histograms.jsonl recorded.
func WindowsFromHistograms(h []results.StepHistograms) map[int]Window {
	out := map[int]Window{}
	for _, s := range h {
		out[s.Step] = Window{StartNS: s.WindowStartNS, EndNS: s.WindowEndNS}
	}
	return out
}

// Resource figure names: what steps[].resources[].name says, with its unit.
const (
	FigGPUUtil       = "gpu_util_percent"             // NVML/DCGM: share of time a kernel ran
	FigSMActive      = "sm_active_percent"            // GPM SM_UTIL or DCGM_FI_PROF_SM_ACTIVE
	FigSMOccupancy   = "sm_occupancy_percent"         // GPM or DCGM_FI_PROF_SM_OCCUPANCY
	FigTensor        = "tensor_util_percent"          // GPM ANY_TENSOR_UTIL or DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
	FigDRAMBW        = "dram_bw_util_percent"         // GPM DRAM_BW_UTIL or DCGM_FI_PROF_DRAM_ACTIVE
	FigMemUtil       = "mem_util_percent"             // memory controller busy (NVML, DCGM_FI_DEV_MEM_COPY_UTIL)
	FigMemUsed       = "mem_used_gib"                 // framebuffer used
	FigMemTotal      = "mem_total_gib"                // framebuffer size
	FigPower         = "power_w"                      // board power
	FigPowerLimit    = "power_limit_w"                // enforced power limit
	FigSMClock       = "sm_clock_mhz"                 // SM clock
	FigMemClock      = "mem_clock_mhz"                // memory clock
	FigThrottled     = "power_thermal_events_percent" // samples with a power or thermal clock-event reason
	FigTemp          = "temp_c"                       // GPU temperature
	FigPCIeTx        = "pcie_tx_mb_per_s"             // PCIe transmit
	FigPCIeRx        = "pcie_rx_mb_per_s"             // PCIe receive
	FigRunning       = "running_requests"             // vllm:num_requests_running, tgi_batch_current_size
	FigWaiting       = "waiting_requests"             // vllm:num_requests_waiting, tgi_queue_size
	FigKVCache       = "kv_cache_percent"             // vllm:kv_cache_usage_perc × 100
	FigPreemptions   = "preemptions"                  // counter delta over the window
	FigPrefixHitRate = "prefix_cache_hit_percent"     // Δhits / Δqueries × 100
	FigServerTTFT    = "server_ttft_mean_ms"          // Δsum / Δcount of vllm:time_to_first_token_seconds
)

// PowerThermalReasons are NVML's clock-event (throttle) reason bits that
// mean power or heat held the clocks down: SW power cap 0x4, HW slowdown
// 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80 (nvml.h,
// nvmlClocksEventReason*). Idle (0x1), application clocks (0x2), sync boost
// (0x10) and display clocks (0x100) are not saturation.
const PowerThermalReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

// DefaultMinResourceSamples is how many readings a step needs before a
// figure's mean, P95 and max are given.
const DefaultMinResourceSamples = 3

// Figure is one resource over one step's window, from one source.
type Figure struct {
	Name   string `json:"name"`
	Source string `json:"source"` // "GPU0" (NVML), "host:port GPU0" (DCGM), "host:port" (server)
	// Samples is the number of readings inside the window.
	Samples int `json:"samples"`
	// Mean, P95 and Max of the readings; for counters (preemptions) and
	// ratios of counters (prefix hits, server TTFT) the value over the
	// window is in Mean alone. Absent when Note says why.
	Mean *float64 `json:"mean,omitempty"`
	P95  *float64 `json:"p95,omitempty"`
	Max  *float64 `json:"max,omitempty"`
	Note string   `json:"note,omitempty"`
}

// StepResources is a step's GPU and server state: steps[].resources.
type StepResources struct {
	Window  Window   `json:"window"`
	Figures []Figure `json:"figures"`
}

// Get returns the named figure with a value, from the source where its
// mean is highest (the busiest GPU, the loaded server), and whether any.
func (r *StepResources) Get(name string) (Figure, bool) {
	var best Figure
	found := false
	if r == nil {
		return best, false
	}
	for _, f := range r.Figures {
		if f.Name != name || f.Mean == nil {
			continue
		}
		if !found || *f.Mean > *best.Mean {
			best, found = f, true
		}
	}
	return best, found
}

// Value is the mean of the named figure (see Get), and whether it has one.
func (r *StepResources) Value(name string) (float64, bool) {
	f, ok := r.Get(name)
	if !ok {
		return 0, false
	}
	return *f.Mean, true
}

// MaxValue is the max of the named figure (its mean for counters).
func (r *StepResources) MaxValue(name string) (float64, bool) {
	f, ok := r.Get(name)
	if !ok {
		return 0, false
	}
	if f.Max != nil {
		return *f.Max, true
	}
	return *f.Mean, true
}

// reading is one figure's value at one instant.
type reading struct {
	key   figKey
	t     int64
	value float64
}

type figKey struct{ name, source string }

// counter is a cumulative series read at one instant (for deltas).
type counterReading struct {
	key   figKey // name: the counter's role ("preemptions", "prefix_hits", ...)
	t     int64
	value float64
}

// Counter roles inside a source.
const (
	ctrPreempt     = "preemptions"
	ctrPrefixHit   = "prefix_hits"
	ctrPrefixQuery = "prefix_queries"
	ctrTTFTSum     = "ttft_sum"
	ctrTTFTCount   = "ttft_count"
)

// StepResourcesOf aggregates samples over each window. A sample counts at
// the middle of its reading (Offset + Took/2), on the run's clock. Steps
// with no window are left out; a step with fewer than minSamples readings
// of a figure gets the count and a note instead of numbers.
func StepResourcesOf(samples []results.Sample, windows map[int]Window, minSamples int) map[int]*StepResources {
	if minSamples <= 0 {
		minSamples = DefaultMinResourceSamples
	}
	var gauges []reading
	var counters []counterReading
	for i := range samples {
		s := &samples[i]
		if s.Error != "" {
			continue
		}
		t := s.Offset + s.Took/2
		gauges = append(gauges, deviceReadings(s, t)...)
		g, c := metricReadings(s, t)
		gauges = append(gauges, g...)
		counters = append(counters, c...)
	}
	sort.SliceStable(counters, func(i, j int) bool { return counters[i].t < counters[j].t })
	out := map[int]*StepResources{}
	for step, w := range windows {
		if w.EndNS <= w.StartNS {
			continue
		}
		out[step] = aggregate(w, gauges, counters, minSamples)
	}
	return out
}

// aggregate builds one step's figures.
func aggregate(w Window, gauges []reading, counters []counterReading, minSamples int) *StepResources {
	r := &StepResources{Window: w, Figures: []Figure{}}
	vals := map[figKey][]float64{}
	var order []figKey
	for _, g := range gauges {
		if g.t < w.StartNS || g.t >= w.EndNS {
			continue
		}
		if _, ok := vals[g.key]; !ok {
			order = append(order, g.key)
		}
		vals[g.key] = append(vals[g.key], g.value)
	}
	for _, k := range order {
		r.Figures = append(r.Figures, summarize(k, vals[k], minSamples))
	}
	r.Figures = append(r.Figures, counterFigures(w, counters)...)
	sort.SliceStable(r.Figures, func(i, j int) bool {
		if r.Figures[i].Source != r.Figures[j].Source {
			return r.Figures[i].Source < r.Figures[j].Source
		}
		return figRank(r.Figures[i].Name) < figRank(r.Figures[j].Name)
	})
	return r
}

// figOrder is the order figures are listed in, server first, then GPU.
var figOrder = []string{FigRunning, FigWaiting, FigKVCache, FigPreemptions, FigPrefixHitRate, FigServerTTFT,
	FigGPUUtil, FigSMActive, FigSMOccupancy, FigTensor, FigDRAMBW, FigMemUtil, FigMemUsed, FigMemTotal, FigPower,
	FigPowerLimit, FigSMClock, FigMemClock, FigThrottled, FigTemp, FigPCIeTx, FigPCIeRx}

func figRank(name string) int {
	for i, n := range figOrder {
		if n == name {
			return i
		}
	}
	return len(figOrder)
}

// summarize gives mean, P95 and max of v, or a note when v is too short.
func summarize(k figKey, v []float64, minSamples int) Figure {
	f := Figure{Name: k.name, Source: k.source, Samples: len(v)}
	if len(v) < minSamples {
		f.Note = fmt.Sprintf("%d samples in the window; %d needed", len(v), minSamples)
		return f
	}
	s := sortedCopy(v)
	var sum float64
	for _, x := range s {
		sum += x
	}
	f.Mean = ptr(sum / float64(len(s)))
	f.P95 = ptr(Percentile(s, 95))
	f.Max = ptr(s[len(s)-1])
	return f
}

// counterFigures turns counters into deltas over w: the last reading at
// or before the window's end minus the last reading at or before its start
// (the first inside it when there is none before).
func counterFigures(w Window, counters []counterReading) []Figure {
	type span struct {
		first, last float64
		seen, in    bool
		n           int
	}
	spans := map[figKey]*span{}
	var sources []string
	for _, c := range counters {
		if c.t >= w.EndNS {
			continue
		}
		sp := spans[c.key]
		if sp == nil {
			sp = &span{}
			spans[c.key] = sp
			if !slices.Contains(sources, c.key.source) {
				sources = append(sources, c.key.source)
			}
		}
		if c.t < w.StartNS || !sp.seen {
			sp.first = c.value
		}
		sp.seen = true
		sp.last = c.value
		if c.t >= w.StartNS {
			sp.in = true
			sp.n++
		}
	}
	delta := func(src, role string) (float64, int, bool) {
		sp := spans[figKey{role, src}]
		if sp == nil || !sp.in {
			return 0, 0, false
		}
		return sp.last - sp.first, sp.n, true
	}
	var out []Figure
	for _, src := range sources {
		if d, n, ok := delta(src, ctrPreempt); ok {
			out = append(out, counterFigure(FigPreemptions, src, n, d, d >= 0, "counter reset in the window"))
		}
		hits, n, okH := delta(src, ctrPrefixHit)
		queries, _, okQ := delta(src, ctrPrefixQuery)
		if okH && okQ {
			out = append(out, counterFigure(FigPrefixHitRate, src, n, 100*hits/queries, queries > 0,
				"no prefix-cache query in the window"))
		}
		sum, n, okS := delta(src, ctrTTFTSum)
		count, _, okC := delta(src, ctrTTFTCount)
		if okS && okC {
			out = append(out, counterFigure(FigServerTTFT, src, n, 1e3*sum/count, count > 0,
				"no first token in the window"))
		}
	}
	return out
}

func counterFigure(name, src string, n int, v float64, ok bool, why string) Figure {
	f := Figure{Name: name, Source: src, Samples: n}
	if ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
		f.Mean = ptr(v)
	} else {
		f.Note = why
	}
	return f
}

// deviceReadings are an NVML sample's per-device figures.
func deviceReadings(s *results.Sample, t int64) []reading {
	var out []reading
	const gib = 1 << 30
	for i := range s.Devices {
		d := &s.Devices[i]
		src := "GPU" + strconv.Itoa(d.Index)
		add := func(name string, v float64) { out = append(out, reading{figKey{name, src}, t, v}) }
		opt := func(name string, v *float64) {
			if v != nil {
				add(name, *v)
			}
		}
		opt(FigGPUUtil, d.UtilPercent)
		opt(FigSMActive, d.SMUtilPercent)
		opt(FigSMOccupancy, d.SMOccupancyPercent)
		opt(FigDRAMBW, d.DRAMBWUtilPercent)
		opt(FigTensor, d.TensorUtilPercent)
		opt(FigMemUtil, d.MemUtilPercent)
		if d.MemUsedBytes != nil {
			add(FigMemUsed, float64(*d.MemUsedBytes)/gib)
		}
		if d.MemTotalBytes != nil {
			add(FigMemTotal, float64(*d.MemTotalBytes)/gib)
		}
		opt(FigPower, d.PowerW)
		opt(FigPowerLimit, d.PowerLimitW)
		opt(FigSMClock, d.SMClockMHz)
		opt(FigMemClock, d.MemClockMHz)
		opt(FigTemp, d.TempC)
		if d.ClockEventReasons != nil {
			add(FigThrottled, boolPercent(*d.ClockEventReasons&PowerThermalReasons != 0))
		}
		if d.PCIeTxKBps != nil {
			add(FigPCIeTx, *d.PCIeTxKBps/1e3)
		}
		if d.PCIeRxKBps != nil {
			add(FigPCIeRx, *d.PCIeRxKBps/1e3)
		}
	}
	return out
}

func boolPercent(b bool) float64 {
	if b {
		return 100
	}
	return 0
}

// dcgmFigures maps dcgm-exporter series to figures and their scale.
var dcgmFigures = map[string]struct {
	name  string
	scale float64
}{
	"DCGM_FI_DEV_GPU_UTIL":               {FigGPUUtil, 1},
	"DCGM_FI_PROF_SM_ACTIVE":             {FigSMActive, 100},
	"DCGM_FI_PROF_SM_OCCUPANCY":          {FigSMOccupancy, 100},
	"DCGM_FI_PROF_DRAM_ACTIVE":           {FigDRAMBW, 100},
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":    {FigTensor, 100},
	"DCGM_FI_DEV_MEM_COPY_UTIL":          {FigMemUtil, 1},
	"DCGM_FI_DEV_FB_USED":                {FigMemUsed, 1.0 / 1024},
	"DCGM_FI_DEV_POWER_USAGE":            {FigPower, 1},
	"DCGM_FI_DEV_POWER_MGMT_LIMIT":       {FigPowerLimit, 1},
	"DCGM_FI_DEV_SM_CLOCK":               {FigSMClock, 1},
	"DCGM_FI_DEV_MEM_CLOCK":              {FigMemClock, 1},
	"DCGM_FI_DEV_GPU_TEMP":               {FigTemp, 1},
	"DCGM_FI_PROF_PCIE_TX_BYTES":         {FigPCIeTx, 1e-6},
	"DCGM_FI_PROF_PCIE_RX_BYTES":         {FigPCIeRx, 1e-6},
	"DCGM_FI_DEV_FB_FREE":                {"", 0}, // with FB_USED: the total
	"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": {FigThrottled, 0},
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":   {FigThrottled, 0},
}

// metricReadings are a scraped sample's figures: DCGM series per GPU
// label, the serving engine's gauges per source, and its counters.
func metricReadings(s *results.Sample, t int64) ([]reading, []counterReading) {
	if len(s.Metrics) == 0 {
		return nil, nil
	}
	host := results.SourceName(s.Source)
	var out []reading
	used := map[string]float64{}
	free := map[string]float64{}
	for key, v := range s.Metrics {
		name := results.SeriesName(key)
		m, ok := dcgmFigures[name]
		if !ok {
			continue
		}
		src := host
		if g, ok := LabelValue(key, "gpu"); ok {
			src = host + " GPU" + g
		}
		switch {
		case name == "DCGM_FI_DEV_FB_FREE":
			free[src] = v
		case m.scale == 0:
			out = append(out, reading{figKey{m.name, src}, t, boolPercent(uint64(v)&PowerThermalReasons != 0)})
		default:
			if name == "DCGM_FI_DEV_FB_USED" {
				used[src] = v
			}
			out = append(out, reading{figKey{m.name, src}, t, v * m.scale})
		}
	}
	for src, u := range used {
		if f, ok := free[src]; ok {
			out = append(out, reading{figKey{FigMemTotal, src}, t, (u + f) / 1024})
		}
	}
	gauge := func(name string, scale float64, families ...string) {
		if v, ok := s.Family(families...); ok {
			out = append(out, reading{figKey{name, host}, t, v * scale})
		}
	}
	gauge(FigRunning, 1, "vllm:num_requests_running", "tgi_batch_current_size")
	gauge(FigWaiting, 1, "vllm:num_requests_waiting", "tgi_queue_size")
	gauge(FigKVCache, 100, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
	var ctr []counterReading
	count := func(role string, families ...string) {
		if v, ok := s.Family(families...); ok {
			ctr = append(ctr, counterReading{figKey{role, host}, t, v})
		}
	}
	count(ctrPreempt, "vllm:num_preemptions_total")
	count(ctrPrefixHit, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
	count(ctrPrefixQuery, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
	count(ctrTTFTSum, "vllm:time_to_first_token_seconds_sum")
	count(ctrTTFTCount, "vllm:time_to_first_token_seconds_count")
	return out, ctr
}

// LabelValue returns the value of label name in a series key in
// Prometheus text form (`name{a="x",b="y"}`), unescaping \\, \" and \n,
// and whether the label is there.
func LabelValue(key, name string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	rest := key[i+1:]
	for len(rest) > 0 {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
			return "", false
		}
		label := strings.TrimLeft(rest[:eq], ", ")
		val, n, ok := quoted(rest[eq+1:])
		if !ok {
			return "", false
		}
		if label == name {
			return val, true
		}
		rest = strings.TrimLeft(rest[eq+1+n:], ",")
		if strings.HasPrefix(rest, "}") {
			return "", false
		}
	}
	return "", false
}

// quoted reads a double-quoted label value at the start of s and returns
// it unescaped with the bytes it spanned.
func quoted(s string) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, true
		case '\\':
			if i+1 >= len(s) {
				return "", 0, false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}
