package report

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// limitations writes what the numbers cannot say, found from the run
// itself: throttling, errors, spikes, client-bound steps, thin samples, the
// network path, and anything odd met while reading the files.
func (m *model) limitations(d *document) {
	d.h(2, "limitations", "Limitations and uncertainty")
	var items []string
	add := func(format string, a ...any) { items = append(items, fmt.Sprintf(format, a...)) }

	// Throttling and errors.
	for _, t := range m.targets {
		var limited, failed, total int
		var limitedSteps []string
		classes := map[results.ErrorClass]int{}
		for _, s := range t.steps {
			total += s.s.Requests
			failed += analysis.Failed(s.s)
			for c, n := range s.s.Errors {
				classes[c] += n
			}
			if n := s.s.Errors[results.ErrRateLimited]; n > 0 {
				limited += n
				limitedSteps = append(limitedSteps, s.name())
			}
		}
		if limited > 0 {
			var ra []float64
			for i := range t.run.Records {
				r := &t.run.Records[i]
				if r.ErrorClass == results.ErrRateLimited && r.RetryAfterMS > 0 {
					ra = append(ra, float64(r.RetryAfterMS))
				}
			}
			s := fmt.Sprintf(
				"**Throttling seen** on %s: %d requests got 429 (%s)",
				t.name,
				limited,
				strings.Join(limitedSteps, ", "),
			)
			if len(ra) > 0 {
				s += fmt.Sprintf("; Retry-After median %s", human(median(ra)))
			}
			add("%s. Throughput there is the provider's limit, not the engine's.", s)
		}
		if failed > 0 {
			var parts []string
			for c, n := range classes {
				if n > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", c, n))
				}
			}
			sort.Strings(parts)
			add("**Errors** on %s: %d of %d measured requests failed (%s); latencies cover successful requests only.",
				t.name, failed, total, strings.Join(parts, ", "))
		}
	}

	// Spikes: a maximum far above the P99, and stalls.
	for _, t := range m.targets {
		var spikes []string
		for _, s := range t.steps {
			if s.s.E2E.Count >= 20 && s.s.E2E.P99 > 0 && s.s.E2E.Max > 3*s.s.E2E.P99 {
				spikes = append(
					spikes,
					fmt.Sprintf("%s (max %s vs P99 %s)", s.name(), human(s.s.E2E.Max), human(s.s.E2E.P99)),
				)
			}
		}
		if len(spikes) > 0 {
			add(
				"**Spikes** on %s: E2E maximum above 3× its P99 in %s. Rare events like these dominate P99.9; more samples would "+
					"say how rare.",
				t.name,
				strings.Join(spikes, "; "),
			)
		}
		stalls := 0
		for _, a := range t.anomalies {
			if a.Kind == analysis.AnomalyStall {
				stalls += a.Affected
			}
		}
		if stalls > 0 {
			add(
				"**Stalls** on %s: %d streams paused mid-stream far beyond the median gap (see Streaming anomalies).",
				t.name,
				stalls,
			)
		}
	}

	// Client-bound steps and schedule lag.
	var bound, late []string
	for _, t := range m.targets {
		for _, s := range t.steps {
			lbl := t.name + " " + s.name()
			if s.s.ClientBound {
				bound = append(bound, fmt.Sprintf("%s (%s)", lbl, s.s.ClientBoundReason))
			}
			if s.s.ScheduleLag.Count > 0 && s.s.ScheduleLag.P99 > 1 {
				late = append(late, fmt.Sprintf("%s (P99 %s ms)", lbl, ms(s.s.ScheduleLag.P99)))
			}
		}
	}
	if len(bound) > 0 {
		add(
			"**Client-bound steps** — the load generator, not the server, may have limited these: %s. Their latencies are "+
				"upper bounds, their throughput lower bounds.",
			strings.Join(bound, "; "),
		)
	}
	if len(late) > 0 {
		add(
			"**Schedule lag** above 1 ms (the client sent late): %s. Latency from schedule (in summary.json) includes that "+
				"delay.",
			strings.Join(late, "; "),
		)
	}

	for _, r := range m.runs {
		items = append(items, shardNotes(r)...)
	}

	// Thin samples.
	thin := 0
	steps := 0
	minN := 0
	maxN := 0
	need := 0
	for _, t := range m.targets {
		for _, s := range t.steps {
			iv, ok := s.interval("ttft_ms", 99)
			if !ok || iv.N == 0 {
				iv, ok = s.interval("e2e_ms", 99)
			}
			if !ok || iv.N == 0 {
				continue
			}
			steps++
			if iv.Adequate {
				continue
			}
			if thin == 0 || iv.N < minN {
				minN = iv.N
			}
			thin++
			maxN, need = max(maxN, iv.N), iv.MinSamples
		}
	}
	if thin > 0 {
		n := fmt.Sprint(minN)
		if maxN != minN {
			n = fmt.Sprintf("%d–%d", minN, maxN)
		}
		add(
			"**Thin samples**: in %d of %d steps the P99 rests on %s samples, fewer than the %d a two-sided 95 %% interval "+
				"needs: "+
				"treat those P99s as lower bounds (the table below marks them \"open\"), and P99.9 needs ten times more.",
			thin,
			steps,
			n,
			need,
		)
	}

	// Network path.
	add("%s", m.networkNote())

	// Server-side view.
	sampled := false
	for _, r := range m.runs {
		sampled = sampled || len(r.Server) > 0
	}
	if !sampled {
		add(
			"**No server-side view**: the run sampled neither the engine's metrics nor the GPUs (`server_metrics`, `gpu` in " +
				"the plan), so queueing inside the server is inferred from client timings alone.",
		)
	}

	// Warm-up and reading problems.
	warm := 0
	for _, t := range m.targets {
		for _, s := range t.steps {
			warm += s.s.Warmup
		}
	}
	if warm > 0 {
		add("%d warm-up requests were excluded from every statistic above (summary.json keeps them apart).", warm)
	}
	for _, r := range m.runs {
		if r.Info.Interrupted {
			add(
				"Run %s was **interrupted**: its last step is partial and unfinished requests are recorded as cancelled.",
				r.Name(),
			)
		}
		for _, n := range r.Notes {
			add("Run %s: %s.", r.Name(), n)
		}
		for _, n := range gpuFaults(r.Server) {
			add("Run %s: **GPU fault** — %s; figures from that device may be wrong.", r.Name(), n)
		}
	}
	d.add(list{items: items})
	m.ciTable(d)
}

// networkNote says how the network between client and targets differs from
// production, from the targets' addresses and the measured connect times.
func (m *model) networkNote() string {
	var loop, remote, emulated []string
	seen := map[string]bool{}
	for _, r := range m.runs {
		for _, t := range r.Info.Plan.Targets {
			if seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			if t.Network != nil {
				emulated = append(emulated, emulatedName(t.Name, t.Network, linkStats(r, t.Name)))
				continue
			}
			if isLoopback(t.URL) {
				loop = append(loop, t.Name)
			} else {
				remote = append(remote, t.Name)
			}
		}
	}
	var conn []float64
	for _, r := range m.runs {
		for i := range r.Records {
			if c := r.Records[i].ConnectNS; c > 0 {
				conn = append(conn, float64(c)/1e6)
			}
		}
	}
	var s string
	switch {
	case len(remote) == 0 && len(loop) == 0:
		s = "**Emulated network**: every target sat behind an emulated link"
	case len(remote) == 0:
		s = fmt.Sprintf(
			"**Network unlike production**: every target (%s) was reached over loopback, so there is no network round trip, "+
				"loss or jitter in these numbers; clients across a real network add at least one RTT to TTFT and may see chunks "+
				"coalesce.",
			strings.Join(loop, ", "),
		)
	case len(loop) > 0:
		s = fmt.Sprintf(
			"**Mixed network paths**: %s over loopback, %s over the network — compare them with that in mind.",
			strings.Join(loop, ", "),
			strings.Join(remote, ", "),
		)
	default:
		s = fmt.Sprintf(
			"**Network path**: targets (%s) were reached over the network from the client host; production clients sit "+
				"elsewhere and see their own RTT.",
			strings.Join(remote, ", "),
		)
	}
	if len(emulated) > 0 {
		s = strings.TrimSuffix(s, ".") + fmt.Sprintf(". Emulated links (netem's user-space proxy: latency, jitter, "+
			"bandwidth, loss as retransmission delay, the TCP handshake; docs/netem.md): %s.", strings.Join(emulated, "; "))
	}
	switch rtts := m.measuredRTTs(); {
	case len(rtts) > 0:
		s += " Round trip without load, measured by TCP connects before and between steps: " +
			strings.Join(rtts, ", ") + "."
	case len(conn) > 0:
		s += fmt.Sprintf(" Median TCP connect time was %s ms (≈ one round trip).", ms(median(conn)))
	}
	return s
}

// measuredRTTs are the targets' measured round trips (run.json's network),
// e.g. "far 71.4 ms".
func (m *model) measuredRTTs() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m.runs {
		for _, n := range r.Info.Network {
			if n.RTTMS > 0 && !seen[n.Target] {
				seen[n.Target] = true
				out = append(out, fmt.Sprintf("%s %s ms", n.Target, ms(n.RTTMS)))
			}
		}
	}
	return out
}

// emulatedName is a target with its emulated link, e.g. "far (cross-region,
// 35ms one way; 2.1 % of chunks delivered over 1 ms late, worst 12 ms)":
// how faithfully a busy host applied the link's delays.
func emulatedName(name string, n *harness.Network, st *results.LinkStats) string {
	what := fmt.Sprintf("%s one way", n.Latency.D())
	if n.Profile != "" {
		what = n.Profile + ", " + what
	}
	if st != nil && st.Chunks > 0 {
		what += fmt.Sprintf("; %s of chunks delivered over 1 ms late, worst %s ms",
			pct(float64(st.Late1ms)/float64(st.Chunks)), ms(st.MaxLateMS))
	}
	return fmt.Sprintf("%s (%s)", name, what)
}

// linkStats are the counts of a target's emulated link in r, if recorded.
func linkStats(r *Run, target string) *results.LinkStats {
	for _, n := range r.Info.Network {
		if n.Target == target {
			return n.LinkStats
		}
	}
	return nil
}

func isLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ciTable gives each step's P50 and P99 TTFT and E2E with their
// distribution-free 95 % intervals.
func (m *model) ciTable(d *document) {
	t := table{
		header: []string{
			"target",
			"step",
			"n",
			"TTFT P50 [95 % CI]",
			"TTFT P99 [95 % CI]",
			"E2E P50 [95 % CI]",
			"E2E P99 [95 % CI]",
		},
		right: []bool{false, false, true, false, false, false, false},
	}
	for _, tv := range m.targets {
		for _, s := range tv.steps {
			row := []string{tv.name, s.name(), fmt.Sprint(s.s.OK)}
			filled := false
			for _, c := range []struct {
				metric string
				p      float64
			}{{"ttft_ms", 50}, {"ttft_ms", 99}, {"e2e_ms", 50}, {"e2e_ms", 99}} {
				iv, ok := s.interval(c.metric, c.p)
				if !ok || iv.N == 0 {
					row = append(row, "—")
					continue
				}
				filled = true
				row = append(row, fmt.Sprintf("%s %s", ms(iv.Value), ciCell(iv)))
			}
			if filled {
				t.rows = append(t.rows, row)
			}
		}
	}
	if len(t.rows) == 0 {
		return
	}
	d.p(
		"%s",
		"Percentiles with distribution-free 95 % confidence intervals from order statistics (exact sample percentiles, so "+
			"they may differ from the HDR figures above in the last digit). \"open\" marks an interval the sample is too "+
			"small to close: the true value may lie beyond it.",
	)
	d.add(t)
}

// gpuFaults lists the GPU errors that grew during the run: XID critical
// errors and uncorrected ECC errors, from NVML readings and from a DCGM
// exporter's (or gpu-agent's) series, as the change between the first and
// last reading of each device.
func gpuFaults(samples []results.Sample) []string {
	type span struct{ first, last float64 }
	seen := map[string]*span{}
	var order []string
	note := func(key string, v float64) {
		sp := seen[key]
		if sp == nil {
			sp = &span{first: v}
			seen[key] = sp
			order = append(order, key)
		}
		sp.last = v
	}
	for i := range samples {
		s := &samples[i]
		for _, d := range s.Devices {
			if d.XIDErrors != nil {
				note(fmt.Sprintf("GPU%d|XID critical errors", d.Index), float64(*d.XIDErrors))
			}
			if d.ECCUncorrected != nil {
				note(fmt.Sprintf("GPU%d|uncorrected ECC errors", d.Index), float64(*d.ECCUncorrected))
			}
		}
		for k, v := range s.Metrics {
			what := ""
			switch results.SeriesName(k) {
			case "testbed_gpu_xid_errors_total":
				what = "XID critical errors"
			case "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
				what = "uncorrected ECC errors"
			default:
				continue
			}
			g, _ := analysis.LabelValue(k, "gpu")
			note(results.SourceName(s.Source)+" GPU"+g+"|"+what, v)
		}
	}
	var out []string
	for _, k := range order {
		if sp := seen[k]; sp.last > sp.first {
			dev, what, _ := strings.Cut(k, "|")
			out = append(out, fmt.Sprintf("%s: %.0f %s during the run", dev, sp.last-sp.first, what))
		}
	}
	return out
}

// shardNotes says how the shards of a merged run agreed, or that a run is
// only one shard's share.
func shardNotes(r *Run) []string {
	if sh := r.Info.Shard; sh != nil {
		return []string{fmt.Sprintf("Run %s is **shard %d of %d** of a scaled-out run: its load and throughput are "+
			"its share only; `testbed merge` joins the shards into the whole.", r.Name(), sh.Index, sh.Count)}
	}
	if len(r.Info.Shards) == 0 || r.Info.Merge == nil {
		return nil
	}
	var spread, rtt int64
	for _, ms := range r.Info.Merge.Steps {
		spread = max(spread, ms.StartSpreadNS)
	}
	for _, sh := range r.Info.Shards {
		rtt = max(rtt, sh.ClockRTTNS)
	}
	notes := []string{fmt.Sprintf("Run %s was **merged from %d shards**: step starts spread at most %s ms "+
		"(limit %s ms); clock offsets known to ±%s ms (half the worst round trip to the coordinator).",
		r.Name(), len(r.Info.Shards), ms(float64(spread)/1e6), ms(float64(r.Info.Merge.MaxSkewNS)/1e6),
		ms(float64(rtt)/2e6))}
	var bad []string
	for _, st := range r.Info.Merge.Steps {
		if len(st.Problems) > 0 {
			bad = append(bad, fmt.Sprintf("step %d: %s", st.Step, strings.Join(st.Problems, "; ")))
		}
	}
	if len(bad) > 0 {
		notes = append(
			notes,
			fmt.Sprintf("**Shards out of step** in %s: these steps are not one load applied at once, "+
				"their throughput over the union window is understated.", strings.Join(bad, "; ")),
		)
	}
	return notes
}
