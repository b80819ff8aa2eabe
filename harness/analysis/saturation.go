package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
)

// Binding resources: what knees[].bound_by names (docs/saturation.md).
const (
	BoundKVCache         = "kv_cache"
	BoundBatchSlots      = "batch_slots"
	BoundCompute         = "compute"
	BoundMemoryBandwidth = "memory_bandwidth"
	BoundPowerThermal    = "power_thermal"
	BoundClient          = "client"
	BoundNetwork         = "network"
	BoundNoneObserved    = "none_observed"
)

// SaturationOptions are the thresholds of the binding-resource rules. The
// zero value uses the defaults documented on each field.
type SaturationOptions struct {
	// KVFull: the KV cache counts as full at this usage (max over the
	// step, %). Default 90.
	KVFull float64 `json:"kv_full_percent"`
	// SlotsFull: batch slots count as full when the mean running requests
	// reach this share of the most seen on the ladder (the server's limit
	// as observed). Default 0.95.
	SlotsFull float64 `json:"slots_full_share"`
	// MinWaiting: a mean waiting queue of at least this many requests is a
	// queue. Default 1.
	MinWaiting float64 `json:"min_waiting"`
	// SMBusy: SM active (mean %) that counts as compute-busy; without an SM
	// figure, GPU utilisation must reach GPUBusy. Defaults 70 and 90.
	SMBusy  float64 `json:"sm_busy_percent"`
	GPUBusy float64 `json:"gpu_busy_percent"`
	// DRAMBusy: DRAM bandwidth utilisation (mean %) that counts as
	// memory-bound. Default 70.
	DRAMBusy float64 `json:"dram_busy_percent"`
	// ITLGrowth: compute and memory bandwidth bind only when the step's ITL
	// P50 is at least this multiple of the lowest load's. Default 1.5.
	ITLGrowth float64 `json:"itl_growth"`
	// ClockDrop: the SM clock has fallen when its mean is below this share
	// of the highest step mean on the ladder. Default 0.9.
	ClockDrop float64 `json:"clock_drop_share"`
	// Throttled: power or thermal clock-event reasons in at least this
	// share of samples (%). Default 10.
	Throttled float64 `json:"throttled_percent"`
	// NetworkShare: the network binds when the client's mean TTFT exceeds
	// the server's own by this share of the client's, that gap at least
	// doubled from the lowest load, and the step is not client-bound.
	// Default 0.5.
	NetworkShare float64 `json:"network_share"`
}

func (o SaturationOptions) withDefaults() SaturationOptions {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.KVFull, 90)
	def(&o.SlotsFull, 0.95)
	def(&o.MinWaiting, 1)
	def(&o.SMBusy, 70)
	def(&o.GPUBusy, 90)
	def(&o.DRAMBusy, 70)
	def(&o.ITLGrowth, 1.5)
	def(&o.ClockDrop, 0.9)
	def(&o.Throttled, 10)
	def(&o.NetworkShare, 0.5)
	return o
}

// Evidence is why a resource was named at a knee: the numbers at the step
// where they were read, where on the ladder it first qualified, and how
// closely it tracked latency over the whole ladder.
type Evidence struct {
	Knee     string  `json:"knee"` // "latency" or "throughput"
	Resource string  `json:"resource"`
	Load     float64 `json:"load"` // the step whose figures these are
	// FirstLoad is the lowest load on the ladder at which the resource
	// qualified; with two resources the lower one came first.
	FirstLoad float64            `json:"first_load"`
	Figures   map[string]float64 `json:"figures"`
	// RankCorrelation is Spearman's ρ between the resource's key figure
	// (Tracks) and Latency across the ladder's steps; absent with fewer
	// than three steps carrying both, or a constant series.
	RankCorrelation *float64 `json:"rank_correlation,omitempty"`
	Tracks          string   `json:"tracks,omitempty"`
	Latency         string   `json:"latency,omitempty"`
	Text            string   `json:"text"`
}

// LadderStep is one step of a ladder as the saturation rules see it.
type LadderStep struct {
	Load      float64
	Summary   *results.StepSummary
	Resources *StepResources // nil when nothing was sampled in its window
}

// satCtx holds ladder-wide references for the rules.
type satCtx struct {
	o        SaturationOptions
	steps    []LadderStep
	slots    float64 // most running requests seen on the ladder
	clockMax float64 // highest SM clock step mean on the ladder
	itl0     float64 // ITL P50 at the lowest load with one
	gap0     float64 // client − server TTFT at the lowest load with both
}

// rule is one binding resource's test at a step: whether it qualifies,
// its figures, its words, and the figure that tracks latency.
type satRule struct {
	name  string
	test  func(c *satCtx, i int) (bool, map[string]float64, string)
	track func(c *satCtx, i int) (float64, bool)
	key   string
}

var satRules = []satRule{
	{BoundKVCache, kvRule, func(c *satCtx, i int) (float64, bool) { return c.max(i, FigKVCache) }, FigKVCache},
	{BoundBatchSlots, slotsRule, func(c *satCtx, i int) (float64, bool) { return c.mean(i, FigWaiting) }, FigWaiting},
	{BoundCompute, computeRule, func(c *satCtx, i int) (float64, bool) { return c.busy(i) }, "sm_active_or_gpu_util"},
	{BoundMemoryBandwidth, dramRule, func(c *satCtx, i int) (float64, bool) { return c.mean(i, FigDRAMBW) },
		FigDRAMBW},
	{BoundPowerThermal, powerRule, func(c *satCtx, i int) (float64, bool) {
		v, ok := c.mean(i, FigSMClock)
		return -v, ok
	}, "-" + FigSMClock},
	{BoundClient, clientRule, nil, ""},
	{
		BoundNetwork,
		networkRule,
		func(c *satCtx, i int) (float64, bool) { return c.gap(i) },
		"client_minus_server_ttft_ms",
	},
}

func (c *satCtx) mean(i int, name string) (float64, bool) { return c.steps[i].Resources.Value(name) }
func (c *satCtx) max(i int, name string) (float64, bool)  { return c.steps[i].Resources.MaxValue(name) }

// p95 is the named figure's P95 (its mean for counters).
func (c *satCtx) p95(i int, name string) (float64, bool) {
	f, ok := c.steps[i].Resources.Get(name)
	switch {
	case !ok:
		return 0, false
	case f.P95 != nil:
		return *f.P95, true
	}
	return *f.Mean, true
}

// busy is SM active where sampled, else GPU utilisation.
func (c *satCtx) busy(i int) (float64, bool) {
	if v, ok := c.mean(i, FigSMActive); ok {
		return v, true
	}
	return c.mean(i, FigGPUUtil)
}

// itl is the step's ITL P50, or its TPOT P50 when nothing streamed.
func itlP50(s *results.StepSummary) float64 {
	if s.ITL.Count > 0 {
		return s.ITL.P50
	}
	return s.TPOT.P50
}

// gap is the client's mean TTFT minus the server's, in ms.
func (c *satCtx) gap(i int) (float64, bool) {
	srv, ok := c.mean(i, FigServerTTFT)
	if !ok || c.steps[i].Summary.TTFT.Count == 0 {
		return 0, false
	}
	return c.steps[i].Summary.TTFT.Mean - srv, true
}

func kvRule(c *satCtx, i int) (bool, map[string]float64, string) {
	kv, okKV := c.max(i, FigKVCache)
	pre, _ := c.mean(i, FigPreemptions)
	wait, _ := c.mean(i, FigWaiting)
	if !okKV && pre == 0 {
		return false, nil, ""
	}
	full := okKV && kv >= c.o.KVFull
	ok := (full || pre > 0) && (wait >= c.o.MinWaiting || pre > 0)
	f := map[string]float64{FigKVCache + "_max": kv, FigPreemptions: pre, FigWaiting: wait}
	txt := fmt.Sprintf("KV cache full (KV cache %.0f %%, waiting %s, %s preemptions)", kv, num1(wait), num1(pre))
	return ok, f, txt
}

func slotsRule(c *satCtx, i int) (bool, map[string]float64, string) {
	run, okR := c.p95(i, FigRunning)
	wait, okW := c.mean(i, FigWaiting)
	if !okR || !okW || c.slots <= 0 {
		return false, nil, ""
	}
	kv, okKV := c.max(i, FigKVCache)
	ok := run >= c.o.SlotsFull*c.slots && wait >= c.o.MinWaiting && (!okKV || kv < c.o.KVFull)
	f := map[string]float64{FigRunning + "_p95": run, "running_limit_observed": c.slots, FigWaiting: wait}
	txt := fmt.Sprintf("batch slots full (running %s/%s, waiting %s)", num1(run), num1(c.slots), num1(wait))
	return ok, f, txt
}

// itlGrowth is the step's ITL P50 over the lowest load's.
func (c *satCtx) itlGrowth(i int) float64 {
	if c.itl0 <= 0 {
		return 0
	}
	return itlP50(c.steps[i].Summary) / c.itl0
}

func computeRule(c *satCtx, i int) (bool, map[string]float64, string) {
	g := c.itlGrowth(i)
	f := map[string]float64{"itl_p50_growth": g}
	if sm, ok := c.mean(i, FigSMActive); ok {
		f[FigSMActive] = sm
		return sm >= c.o.SMBusy && g >= c.o.ITLGrowth, f,
			fmt.Sprintf("compute-bound (SM active %.0f %%, ITL P50 ×%.1f over the lowest load)", sm, g)
	}
	u, ok := c.mean(i, FigGPUUtil)
	if !ok {
		return false, nil, ""
	}
	f[FigGPUUtil] = u
	return u >= c.o.GPUBusy && g >= c.o.ITLGrowth, f,
		fmt.Sprintf("compute-bound (GPU util %.0f %%, ITL P50 ×%.1f over the lowest load)", u, g)
}

func dramRule(c *satCtx, i int) (bool, map[string]float64, string) {
	d, ok := c.mean(i, FigDRAMBW)
	if !ok {
		return false, nil, ""
	}
	g := c.itlGrowth(i)
	f := map[string]float64{FigDRAMBW: d, "itl_p50_growth": g}
	return d >= c.o.DRAMBusy && g >= c.o.ITLGrowth, f,
		fmt.Sprintf("memory bandwidth (DRAM %.0f %%, ITL P50 ×%.1f over the lowest load)", d, g)
}

func powerRule(c *satCtx, i int) (bool, map[string]float64, string) {
	clk, okC := c.mean(i, FigSMClock)
	thr, okT := c.mean(i, FigThrottled)
	if !okC && !okT {
		return false, nil, ""
	}
	f := map[string]float64{}
	var parts []string
	ok := false
	if okC && c.clockMax > 0 {
		f[FigSMClock] = clk
		f["sm_clock_max_on_ladder"] = c.clockMax
		parts = append(parts, fmt.Sprintf("SM clock %.0f of %.0f MHz", clk, c.clockMax))
		ok = clk < c.o.ClockDrop*c.clockMax
	}
	if okT {
		f[FigThrottled] = thr
		parts = append(parts, fmt.Sprintf("power/thermal clock events in %.0f %% of samples", thr))
		ok = ok || thr >= c.o.Throttled
	}
	if p, okP := c.mean(i, FigPower); okP {
		f[FigPower] = p
		if l, okL := c.mean(i, FigPowerLimit); okL {
			f[FigPowerLimit] = l
			parts = append(parts, fmt.Sprintf("%.0f/%.0f W", p, l))
		}
	}
	return ok, f, "power/thermal throttling (" + strings.Join(parts, ", ") + ")"
}

func clientRule(c *satCtx, i int) (bool, map[string]float64, string) {
	s := c.steps[i].Summary
	if !s.ClientBound {
		return false, nil, ""
	}
	why, _, _ := strings.Cut(s.ClientBoundReason, ":")
	return true, map[string]float64{"client_bound": 1}, "client-bound too (" + why + ")"
}

func networkRule(c *satCtx, i int) (bool, map[string]float64, string) {
	g, ok := c.gap(i)
	if !ok || c.steps[i].Summary.ClientBound {
		return false, nil, "" // a starved client's own lateness is not the network's
	}
	cl := c.steps[i].Summary.TTFT.Mean
	f := map[string]float64{"client_ttft_mean_ms": cl, FigServerTTFT: cl - g, "gap_ms": g}
	q := cl > 0 && g >= c.o.NetworkShare*cl && (c.gap0 <= 0 || g >= 2*c.gap0)
	return q, f, fmt.Sprintf("network (client TTFT %s vs server %s)", msText(cl), msText(cl-g))
}

func num1(v float64) string {
	if v == math.Trunc(v) || v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func msText(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// newSatCtx prepares the ladder-wide references; steps are sorted by load.
func newSatCtx(steps []LadderStep, o SaturationOptions) *satCtx {
	c := &satCtx{o: o, steps: steps}
	for i := range steps {
		if v, ok := c.max(i, FigRunning); ok {
			c.slots = math.Max(c.slots, v)
		}
		if v, ok := c.mean(i, FigSMClock); ok {
			c.clockMax = math.Max(c.clockMax, v)
		}
		if c.itl0 == 0 {
			c.itl0 = itlP50(steps[i].Summary)
		}
		if g, ok := c.gap(i); ok && c.gap0 == 0 {
			c.gap0 = g
		}
	}
	return c
}

// Saturate names what bound k's latency knee (else its throughput knee)
// from the ladder's steps, sorted by load, and fills BoundBy, Evidence
// and Verdict; ThroughputBoundBy gets the throughput knee's names.
func Saturate(k *Knee, steps []LadderStep, o SaturationOptions) {
	o = o.withDefaults()
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Load < steps[j].Load })
	c := newSatCtx(steps, o)
	sampled := false
	for _, s := range steps {
		sampled = sampled || (s.Resources != nil && len(s.Resources.Figures) > 0)
	}
	kinds := []struct {
		name string
		at   *float64
	}{{"latency", k.LatencyKnee}, {"throughput", k.ThroughputKnee}}
	for _, kind := range kinds {
		if kind.at == nil {
			continue
		}
		names, ev := c.verdict(kind.name, *kind.at, k.LatencyMetric, sampled)
		k.Evidence = append(k.Evidence, ev...)
		if kind.name == "throughput" {
			k.ThroughputBoundBy = names
		}
		if k.BoundBy == nil {
			k.BoundBy = names
			k.Verdict = c.sentence(k, kind.name, *kind.at, ev)
		}
	}
}

// verdict applies every rule at the knee's step (or the next one up, where
// the queue the knee causes first shows) and orders what qualified by the
// load at which it first did.
func (c *satCtx) verdict(kind string, at float64, metric string, sampled bool) ([]string, []Evidence) {
	ki := -1
	for i, s := range c.steps {
		if s.Load == at {
			ki = i
		}
	}
	if ki < 0 {
		return nil, nil
	}
	var ev []Evidence
	for _, r := range satRules {
		e, ok := c.apply(r, kind, ki, metric)
		if ok {
			ev = append(ev, e)
		}
	}
	// Server and GPU resources first, by where they first qualified; a
	// client-bound step is a caveat on its latencies, not their cause.
	sort.SliceStable(ev, func(i, j int) bool {
		ci := ev[i].Resource == BoundClient
		cj := ev[j].Resource == BoundClient
		if ci != cj {
			return cj
		}
		return ev[i].FirstLoad < ev[j].FirstLoad
	})
	if len(ev) == 0 {
		txt := "nothing sampled explains it"
		if !sampled {
			txt = "no server or GPU samples in the run: what saturated is unknown"
		}
		return []string{BoundNoneObserved}, []Evidence{{Knee: kind, Resource: BoundNoneObserved, Load: at,
			FirstLoad: at, Figures: c.context(ki), Text: txt}}
	}
	names := make([]string, len(ev))
	for i, e := range ev {
		names[i] = e.Resource
	}
	return names, ev
}

// apply tests one rule at the knee (ki) and just past it.
func (c *satCtx) apply(r satRule, kind string, ki int, metric string) (Evidence, bool) {
	at := ki
	ok, f, txt := r.test(c, ki)
	if !ok && ki+1 < len(c.steps) {
		at = ki + 1
		ok, f, txt = r.test(c, at)
	}
	if !ok {
		return Evidence{}, false
	}
	first := at
	for i := range at {
		if q, _, _ := r.test(c, i); q {
			first = i
			break
		}
	}
	e := Evidence{Knee: kind, Resource: r.name, Load: c.steps[at].Load, FirstLoad: c.steps[first].Load,
		Figures: f, Text: txt}
	if r.track != nil {
		e.Tracks, e.Latency = r.key, latencyName(metric)
		e.RankCorrelation = c.correlation(r.track, metric)
	}
	return e, true
}

func latencyName(metric string) string {
	if metric == "e2e_p99" {
		return "e2e_p99_ms"
	}
	return "ttft_p99_ms"
}

// correlation is Spearman's ρ of track against the latency metric across
// the ladder.
func (c *satCtx) correlation(track func(*satCtx, int) (float64, bool), metric string) *float64 {
	var xs, ys []float64
	for i, s := range c.steps {
		x, ok := track(c, i)
		lat := s.Summary.TTFT.P99
		if metric == "e2e_p99" {
			lat = s.Summary.E2E.P99
		}
		if !ok || lat <= 0 {
			continue
		}
		xs = append(xs, x)
		ys = append(ys, lat)
	}
	rho, ok := Spearman(xs, ys)
	if !ok {
		return nil
	}
	return ptr(math.Round(rho*1000) / 1000)
}

// context is the step's headline figures, for the sentence and for
// none_observed's evidence.
func (c *satCtx) context(i int) map[string]float64 {
	f := map[string]float64{}
	for _, n := range []string{FigRunning, FigWaiting, FigKVCache, FigGPUUtil, FigSMActive, FigPower, FigMemUsed} {
		if v, ok := c.mean(i, n); ok {
			f[n] = v
		}
	}
	return f
}

// sentence is the knee's verdict in one line, e.g. "P99 TTFT knee at
// concurrency 48: batch slots full (running 32/32, waiting 14), KV cache
// 41 %, GPU util 97 %".
func (c *satCtx) sentence(k *Knee, kind string, at float64, ev []Evidence) string {
	head := "Throughput knee"
	if kind == "latency" {
		head = "P99 TTFT knee"
		if k.LatencyMetric == "e2e_p99" {
			head = "P99 E2E knee"
		}
	}
	unit := "concurrency " + fmtLoad(at)
	if k.Ladder == LadderRate {
		unit = fmtLoad(at) + " req/s"
	}
	var parts []string
	named := map[string]bool{}
	for i, e := range ev {
		t := e.Text
		if i > 0 && e.FirstLoad > ev[0].FirstLoad && e.Resource != BoundClient {
			t = "then " + t + " from " + fmtLoad(e.FirstLoad)
		}
		if e.RankCorrelation != nil {
			t += fmt.Sprintf(" [ρ %.2f with %s]", *e.RankCorrelation, strings.TrimSuffix(e.Latency, "_ms"))
		}
		parts = append(parts, t)
		named[e.Resource] = true
	}
	ki := -1
	for i, s := range c.steps {
		if s.Load == at {
			ki = i
		}
	}
	if ki >= 0 {
		if v, ok := c.max(ki, FigKVCache); ok && !named[BoundKVCache] {
			parts = append(parts, "KV cache "+pctText(v))
		}
		if v, ok := c.mean(ki, FigGPUUtil); ok && !named[BoundCompute] {
			parts = append(parts, fmt.Sprintf("GPU util %.0f %%", v))
		}
		if v, ok := c.mean(ki, FigPower); ok && !named[BoundPowerThermal] {
			parts = append(parts, fmt.Sprintf("power %.0f W", v))
		}
	}
	return head + " at " + unit + ": " + strings.Join(parts, ", ")
}

func fmtLoad(v float64) string { return fmt.Sprintf("%g", v) }

// pctText writes a percentage with a decimal below 10 %, so a nearly
// empty cache does not read as 0.
func pctText(v float64) string {
	if v > 0 && v < 0.05 {
		return "<0.1 %"
	}
	if v < 10 && v != math.Trunc(v) {
		return fmt.Sprintf("%.1f %%", v)
	}
	return fmt.Sprintf("%.0f %%", v)
}

// Spearman is the rank correlation of x and y (average ranks for ties),
// and whether it is defined: at least three pairs, neither constant.
func Spearman(x, y []float64) (float64, bool) {
	if len(x) != len(y) || len(x) < 3 {
		return 0, false
	}
	rx := ranks(x)
	ry := ranks(y)
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx /= float64(len(rx))
	my /= float64(len(ry))
	var sxy, sxx, syy float64
	for i := range rx {
		dx := rx[i] - mx
		dy := ry[i] - my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0, false
	}
	return sxy / math.Sqrt(sxx*syy), true
}

// ranks gives 1-based ranks, ties sharing their average rank.
func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}
