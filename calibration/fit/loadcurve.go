package fit

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Load-curve fit: the latency of a server that slows down under load
// without a visible shared step, as distributions at each number of
// requests in flight. The count comes from the records themselves: a
// request is in flight from its send until its response was fully read
// (the mock's load_curve mode counts a request until just before it writes
// the end of the response, which comes to the same), so the count at a
// time is the sends up to it minus the ends up to it. A request's TTFT is
// booked at the count sendWindow after its send (itself included):
// requests sent together, as a closed loop's workers do when a step
// starts, reach the server in an order the client cannot see, so each is
// booked with the whole burst in flight rather than by the client's order
// of sends. Each inter-token gap is booked at the count when the chunk
// before it arrived, as the mock's load_curve mode draws them. Every step
// of the run contributes, ramps and drains included, so the levels are the
// counts the server actually saw, not the ladder's nominal concurrency.

// Minimum samples for an in-flight count to become a level: fewer say too
// little about a distribution; their counts are read between the levels.
const (
	minLevelTTFT = 5
	minLevelITL  = 20
)

// sendWindow is how long after its send a request's count is taken for
// its TTFT: sends closer than this count as one burst.
const sendWindow = int64(time.Millisecond)

// LoadCurve is the load-curve fit and its evidence.
type LoadCurve struct {
	Curve    engine.LoadCurve
	Validity engine.Validity
	// Sparse counts the in-flight counts seen with too few samples to be
	// a level (interpolated between levels in the profile).
	Sparse int
}

// occupancy counts requests in flight from the records' send and end times.
type occupancy struct{ starts, ends []int64 }

func newOccupancy(recs []results.Record) occupancy {
	var o occupancy
	for i := range recs {
		r := &recs[i]
		if r.SentNS <= 0 {
			continue
		}
		end := max(r.DoneNS, r.LastTokenNS, r.SentNS)
		o.starts = append(o.starts, r.SentNS)
		o.ends = append(o.ends, end)
	}
	slices.Sort(o.starts)
	slices.Sort(o.ends)
	return o
}

// at is the number of requests in flight at t (sent at or before t, not
// yet ended).
func (o occupancy) at(t int64) int {
	s := sort.Search(len(o.starts), func(i int) bool { return o.starts[i] > t })
	e := sort.Search(len(o.ends), func(i int) bool { return o.ends[i] > t })
	return s - e
}

// ttftSample is one request's TTFT at its in-flight count and prompt.
type ttftSample struct {
	n      int
	prompt float64
	ns     float64
}

// usable reports whether r's latencies can be measured: a successful,
// measured (not warm-up) request with a first token.
func usable(r *results.Record) bool {
	return r.OK() && !r.Warmup && r.FirstTokenNS > 0 && r.SentNS > 0
}

// tokenGaps returns r's inter-token gaps per token with the time each
// began: a chunk of k tokens counts as k gaps of a k-th of its chunk gap.
func tokenGaps(r *results.Record, visit func(start int64, gap float64)) {
	t := r.FirstTokenNS
	for i, g := range r.ChunkGapsNS {
		k := 1
		if i+1 < len(r.ChunkTokens) && r.ChunkTokens[i+1] > 0 {
			k = int(r.ChunkTokens[i+1])
		}
		for range k {
			visit(t, float64(g)/float64(k))
		}
		t += g
	}
}

// fitLoadCurve builds the load curve from the records of one target.
func fitLoadCurve(recs []results.Record) (*LoadCurve, error) {
	occ := newOccupancy(recs)
	var ttft []ttftSample
	itl := map[int][]float64{}
	minPrompt := math.MaxInt
	maxPrompt := 0
	for i := range recs {
		r := &recs[i]
		if !usable(r) || !r.Stream {
			continue
		}
		ttft = append(ttft, ttftSample{
			n:      occ.at(r.SentNS + sendWindow),
			prompt: float64(r.NIn),
			ns:     float64(r.FirstTokenNS - r.SentNS),
		})
		minPrompt = min(minPrompt, r.NIn)
		maxPrompt = max(maxPrompt, r.NIn)
		tokenGaps(r, func(start int64, gap float64) {
			n := occ.at(start)
			itl[n] = append(itl[n], gap)
		})
	}
	if len(ttft) == 0 {
		return nil, fmt.Errorf("no successful streamed request")
	}
	lc := &LoadCurve{}
	slope, ref := promptSlope(ttft)
	lc.Curve.TTFTPerPromptTokenUS = round(slope/1e3, 3)
	lc.Curve.PromptTokens = int(math.Round(ref))
	byN := map[int][]float64{}
	for _, s := range ttft {
		// At the reference prompt; never below 0, as the mock never draws below 0.
		byN[s.n] = append(byN[s.n], max(0, s.ns-slope*(s.prompt-float64(lc.Curve.PromptTokens))))
	}
	for _, n := range keysInt(byN, itl) {
		if len(byN[n]) < minLevelTTFT || len(itl[n]) < minLevelITL {
			lc.Sparse++
			continue
		}
		lc.Curve.Levels = append(lc.Curve.Levels, engine.LoadLevel{
			InFlight: n, TTFT: quantilesOf(byN[n]), ITL: quantilesOf(itl[n]),
			TTFTSamples: len(byN[n]), ITLSamples: len(itl[n]),
		})
	}
	if len(lc.Curve.Levels) == 0 {
		return nil, fmt.Errorf("no in-flight count with at least %d requests and %d inter-token gaps",
			minLevelTTFT, minLevelITL)
	}
	check := engine.Profile{Name: "load curve", Mode: engine.ModeLoadCurve, LoadCurve: lc.Curve}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	levels := lc.Curve.Levels
	lc.Validity = engine.Validity{
		MinInFlight: levels[0].InFlight, MaxInFlight: levels[len(levels)-1].InFlight,
		MinPromptTokens: minPrompt, MaxPromptTokens: maxPrompt,
	}
	return lc, nil
}

// promptSlope fits TTFT's growth with prompt length (ns per token) within
// in-flight counts, so load does not pass for prompt length, and returns
// it with the mean prompt. Each count's own least-squares slope is
// weighted by its precision (prompt spread over residual variance), so a
// count whose TTFT varies for other reasons (a burst of sends at a step's
// start, whose order at the server the client cannot see) weighs little.
// A negative slope is noise and becomes 0.
func promptSlope(s []ttftSample) (slope, meanPrompt float64) {
	groups := map[int][]ttftSample{}
	for _, v := range s {
		groups[v.n] = append(groups[v.n], v)
		meanPrompt += v.prompt
	}
	meanPrompt /= float64(len(s))
	var num, den float64
	for _, g := range groups {
		if len(g) < 3 {
			continue
		}
		var mx, my float64
		for _, v := range g {
			mx += v.prompt
			my += v.ns
		}
		mx /= float64(len(g))
		my /= float64(len(g))
		var sxy, sxx float64
		for _, v := range g {
			sxy += (v.prompt - mx) * (v.ns - my)
			sxx += (v.prompt - mx) * (v.prompt - mx)
		}
		if sxx == 0 {
			continue
		}
		b := sxy / sxx
		var rss float64
		for _, v := range g {
			e := v.ns - my - b*(v.prompt-mx)
			rss += e * e
		}
		sigma2 := math.Max(rss/float64(len(g)-2), 1) // 1 ns²: exact data
		w := sxx / sigma2                            // 1 / var(b)
		num += w * b
		den += w
	}
	if den == 0 {
		return 0, meanPrompt
	}
	return max(0, num/den), meanPrompt
}

// quantilesOf summarises samples (ns) at engine.QuantileLevels, to the µs.
func quantilesOf(v []float64) engine.Quantiles {
	var out [len(engine.QuantileLevels)]time.Duration
	for i, u := range engine.QuantileLevels {
		out[i] = time.Duration(analysis.Quantile(v, u)).Round(time.Microsecond)
		if i > 0 {
			out[i] = max(out[i], out[i-1])
		}
	}
	return engine.QuantilesOf(out)
}

// keysInt returns the keys of a and b, sorted, without repeats.
func keysInt(a, b map[int][]float64) []int {
	var out []int
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// printLoadCurve writes the load curve's levels.
func (r *Result) printLoadCurve(w io.Writer) {
	lc := r.LoadCurve
	fmt.Fprintf(w, "load curve: TTFT and ITL at each count of requests in flight "+
		"(%d levels, %d sparse counts between them), "+
		"TTFT %+.3f µs per prompt token from %d\n", len(lc.Curve.Levels), lc.Sparse,
		lc.Curve.TTFTPerPromptTokenUS, lc.Curve.PromptTokens)
	for _, l := range lc.Curve.Levels {
		fmt.Fprintf(w, "  %3d in flight: TTFT p50 %s p99 %s (%d requests), ITL p50 %s p99 %s (%d gaps)\n",
			l.InFlight, fmtMS(l.TTFT.P50), fmtMS(l.TTFT.P99), l.TTFTSamples,
			fmtMS(l.ITL.P50), fmtMS(l.ITL.P99), l.ITLSamples)
	}
}

func timeNS(ns int64) time.Duration { return time.Duration(ns) }
