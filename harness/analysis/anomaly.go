package analysis

import (
	"fmt"
	"math"
	"sort"

	"github.com/llm-testbed/testbed/harness/results"
)

// Anomaly kinds, as they appear in analysis.json.
const (
	// AnomalyPacing: inter-chunk gaps sit at one value with almost no spread,
	// the signature of output re-timed at a fixed interval (a proxy or a
	// server pacing tokens) rather than produced by engine steps.
	AnomalyPacing = "fixed_interval_pacing"
	// AnomalyStall: a gap far above the group's median gap.
	AnomalyStall = "stall"
	// AnomalyMultiToken: chunks carrying more than one token each, which
	// hides per-token latency (ITL is then spread over the chunk's tokens).
	AnomalyMultiToken = "multi_token_chunks"
	// AnomalyStreamCut: a stream that delivered tokens and then broke.
	AnomalyStreamCut = "stream_cut"
	// AnomalyLateFirstToken: the first response byte came long before the
	// first token (headers or a role-only chunk flushed early), so a client
	// timing first byte would understate TTFT.
	AnomalyLateFirstToken = "first_byte_before_first_token"
)

// StreamSample is one streamed request, reduced to what anomaly detection
// needs. Times are offsets on one monotonic clock, in ns; 0 means "never".
type StreamSample struct {
	Target       string
	Group        string             // the step it belongs to, e.g. "concurrency=32"
	ErrorClass   results.ErrorClass // "" when the request succeeded
	SentNS       int64
	FirstByteNS  int64
	FirstTokenNS int64
	ChunkGapsNS  []int64 // gaps between consecutive token-carrying chunks
	OutputTokens int     // server-reported when available
}

// Anomaly is one kind of streaming trouble seen in one step of one target.
type Anomaly struct {
	Kind     string  `json:"kind"`
	Target   string  `json:"target"`
	Group    string  `json:"group"`
	Affected int     `json:"affected"` // requests showing it
	Of       int     `json:"of"`       // streamed requests examined in the group
	Value    float64 `json:"value"`    // the kind's key figure, in Unit
	Unit     string  `json:"unit"`
	Detail   string  `json:"detail"`
}

// AnomalyOptions holds detection thresholds; the zero value uses defaults.
type AnomalyOptions struct {
	// PacingMaxSpread: chunk gaps whose robust spread (1.4826 × median
	// absolute deviation, relative to the median: the CV a normal
	// distribution would have) is at most this come at one fixed interval.
	// Default 0.05: an engine's inter-token gaps vary by tens of percent
	// with batch composition, while a re-timing gateway's ticks vary only
	// by the client's own scheduling noise.
	PacingMaxSpread float64
	PacingMinGaps   int     // gaps needed before judging pacing; default 50
	StallFactor     float64 // a stall is a gap > StallFactor × median gap…; default 10
	StallMinMS      float64 // …and > StallMinMS; default 50
	LateShare       float64 // first token − first byte > LateShare × TTFT…; default 0.5
	LateMinMS       float64 // …and > LateMinMS; default 20
}

func (o AnomalyOptions) withDefaults() AnomalyOptions {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.PacingMaxSpread, 0.05)
	def(&o.StallFactor, 10)
	def(&o.StallMinMS, 50)
	def(&o.LateShare, 0.5)
	def(&o.LateMinMS, 20)
	if o.PacingMinGaps <= 0 {
		o.PacingMinGaps = 50
	}
	return o
}

// DetectAnomalies examines streamed requests group by group (target, group)
// and returns every anomaly found, in a stable order (target, group, kind).
func DetectAnomalies(samples []StreamSample, o AnomalyOptions) []Anomaly {
	o = o.withDefaults()
	type key struct{ target, group string }
	groups := map[key][]StreamSample{}
	var keys []key
	for _, s := range samples {
		k := key{s.Target, s.Group}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].target != keys[j].target {
			return keys[i].target < keys[j].target
		}
		return keys[i].group < keys[j].group
	})
	var out []Anomaly
	for _, k := range keys {
		out = append(out, detectGroup(k.target, k.group, groups[k], o)...)
	}
	return out
}

func detectGroup(target, group string, ss []StreamSample, o AnomalyOptions) []Anomaly {
	var out []Anomaly
	add := func(kind string, affected int, value float64, unit, detail string) {
		out = append(out, Anomaly{Kind: kind, Target: target, Group: group, Affected: affected,
			Of: len(ss), Value: value, Unit: unit, Detail: detail})
	}
	n := 0
	for _, s := range ss {
		n += len(s.ChunkGapsNS)
	}
	gaps := make([]float64, 0, n)
	for _, s := range ss {
		for _, g := range s.ChunkGapsNS {
			gaps = append(gaps, float64(g)/1e6)
		}
	}
	// Medians by selection, not sorting: a step can hold millions of gaps.
	med := math.NaN()
	if len(gaps) > 0 {
		med = selectRank(gaps, (len(gaps)+1)/2)
	}

	// Fixed-interval pacing.
	if len(gaps) >= o.PacingMinGaps && med > 0 {
		dev := make([]float64, len(gaps))
		for i, g := range gaps {
			dev[i] = math.Abs(g - med)
		}
		spread := 1.4826 * selectRank(dev, (len(dev)+1)/2) / med
		if spread <= o.PacingMaxSpread {
			n := 0
			for _, s := range ss {
				if len(s.ChunkGapsNS) > 0 {
					n++
				}
			}
			add(AnomalyPacing, n, med, "ms", fmt.Sprintf(
				"%d chunk gaps sit at %.2f ms with a robust spread of %.1f %%: output arrives on a fixed tick, not as the engine "+
					"produces it",
				len(gaps),
				med,
				spread*100,
			))
		}
	}

	// Stalls.
	if med > 0 {
		limit := math.Max(o.StallFactor*med, o.StallMinMS)
		n, longest := 0, 0.0
		for _, s := range ss {
			stalled := false
			for _, g := range s.ChunkGapsNS {
				if ms := float64(g) / 1e6; ms > limit {
					stalled = true
					longest = math.Max(longest, ms)
				}
			}
			if stalled {
				n++
			}
		}
		if n > 0 {
			add(AnomalyStall, n, longest, "ms", fmt.Sprintf(
				"%d request(s) paused > %.0f ms mid-stream (median gap %.2f ms); longest %.0f ms",
				n, limit, med, longest))
		}
	}

	// Multi-token chunks.
	{
		n := 0
		toks := 0
		chunks := 0
		for _, s := range ss {
			if s.FirstTokenNS == 0 || s.OutputTokens == 0 {
				continue
			}
			c := len(s.ChunkGapsNS) + 1
			if s.OutputTokens > c {
				n++
				toks += s.OutputTokens
				chunks += c
			}
		}
		if n > 0 {
			per := float64(toks) / float64(chunks)
			add(AnomalyMultiToken, n, per, "tokens/chunk", fmt.Sprintf(
				"%d request(s) received %.1f tokens per chunk on average: per-token latency is hidden inside chunks",
				n, per))
		}
	}

	// Mid-stream cuts.
	{
		n := 0
		for _, s := range ss {
			if s.ErrorClass == results.ErrStreamCut && s.FirstTokenNS > 0 {
				n++
			}
		}
		if n > 0 {
			add(AnomalyStreamCut, n, float64(n)/float64(len(ss))*100, "%", fmt.Sprintf(
				"%d stream(s) broke after delivering tokens", n))
		}
	}

	// First byte long before first token.
	{
		n, worst := 0, 0.0
		for _, s := range ss {
			if s.FirstByteNS == 0 || s.FirstTokenNS == 0 {
				continue
			}
			early := float64(s.FirstTokenNS-s.FirstByteNS) / 1e6
			ttft := float64(s.FirstTokenNS-s.SentNS) / 1e6
			if early > o.LateMinMS && early > o.LateShare*ttft {
				n++
				worst = math.Max(worst, early)
			}
		}
		if n > 0 {
			add(AnomalyLateFirstToken, n, worst, "ms", fmt.Sprintf(
				"%d request(s) got their first byte up to %.0f ms before the first token: time to first byte would understate TTFT",
				n,
				worst,
			))
		}
	}
	return out
}

// selectRank returns the k-th smallest value of v (1-based), reordering v
// in place: Hoare's selection with a median-of-three pivot, O(len(v)) on
// average.
func selectRank(v []float64, k int) float64 {
	lo, hi, k := 0, len(v)-1, k-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three as the pivot, to stay linear on sorted input.
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}
