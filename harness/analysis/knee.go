package analysis

import (
	"math"
	"sort"
)

// Ladder kinds: a closed-loop concurrency ladder or an open-loop rate ladder.
const (
	LadderConcurrency = "concurrency"
	LadderRate        = "rate"
)

// LadderPoint is one step of a ladder, reduced to what the knee needs.
type LadderPoint struct {
	Load       float64 // concurrency, or offered requests/s
	Throughput float64 // output tokens/s (or any capacity measure)
	TTFTP99    float64 // ms; 0 or NaN when unknown
	E2EP99     float64 // ms; 0 or NaN when unknown
	ErrorRate  float64 // failed / requests, 0..1
	MeetsSLO   bool    // every SLO of the plan held (true when the plan sets none)
}

// KneeOptions tunes knee detection. The zero value uses the defaults below.
type KneeOptions struct {
	// MinGain: throughput has stopped growing when the marginal gain per added
	// load unit falls below MinGain × the initial slope. Default 0.2.
	MinGain float64
	// LatencyFactor: E2E latency has taken off when a step's E2E P99
	// exceeds LatencyFactor × its value at the lowest load. Default 2.
	LatencyFactor float64
	// QueueShare: TTFT has taken off when a step's TTFT P99 exceeds its
	// lowest-load value by more than QueueShare × the lowest-load E2E P99,
	// i.e. requests now wait for a good part of another request to finish
	// (queueing), not merely for the engine's current step. A ratio on TTFT
	// alone would fire early: a low-load TTFT of one prefill step doubles as
	// soon as requests arrive mid-step. Default 0.5.
	QueueShare float64
	// MaxErrorRate: a step failing more than this share of requests is never
	// a recommended operating point. Default 0.01.
	MaxErrorRate float64
}

func (o KneeOptions) withDefaults() KneeOptions {
	if o.MinGain <= 0 {
		o.MinGain = 0.2
	}
	if o.LatencyFactor <= 1 {
		o.LatencyFactor = 2
	}
	if o.QueueShare <= 0 {
		o.QueueShare = 0.5
	}
	if o.MaxErrorRate <= 0 {
		o.MaxErrorRate = 0.01
	}
	return o
}

// Knee is the analysis of one ladder of one target. A nil load means the
// ladder never reached that point (e.g. throughput still scaling at its top).
type Knee struct {
	Target string `json:"target"`
	Ladder string `json:"ladder"` // LadderConcurrency | LadderRate
	// ThroughputKnee is the lowest load past which throughput never gains
	// MinGain × the initial slope per added load unit again: past it, more
	// load buys (almost) nothing.
	ThroughputKnee *float64 `json:"throughput_knee"`
	// LatencyKnee is the first load from which TTFT P99 or E2E P99 stays
	// beyond its threshold (KneeOptions.QueueShare, LatencyFactor) at every
	// higher load; LatencyMetric names which.
	LatencyKnee   *float64 `json:"latency_knee"`
	LatencyMetric string   `json:"latency_metric,omitempty"`
	// LatencyElbow is the Kneedle elbow of the E2E P99 curve (where it bends
	// upward most), a second opinion independent of any threshold.
	LatencyElbow *float64 `json:"latency_elbow"`
	// BestOperatingPoint is the highest load at or below the throughput knee,
	// below the latency knee, meeting every SLO with errors ≤ MaxErrorRate.
	BestOperatingPoint *float64 `json:"best_operating_point"`
	// Throughput at the best operating point and the most seen on the ladder.
	BestThroughput  float64 `json:"best_throughput"`
	MaxThroughput   float64 `json:"max_throughput"`
	MaxThroughputAt float64 `json:"max_throughput_at"`
	Steps           int     `json:"steps"`
	// BoundBy names what bound the latency knee (else the throughput
	// knee), first-qualifying first: kv_cache, batch_slots, compute,
	// memory_bandwidth, power_thermal, client, network or none_observed.
	// ThroughputBoundBy is the same at the throughput knee. Evidence holds
	// the numbers behind both; Verdict says it in one sentence.
	BoundBy           []string   `json:"bound_by,omitempty"`
	ThroughputBoundBy []string   `json:"throughput_bound_by,omitempty"`
	Evidence          []Evidence `json:"evidence,omitempty"`
	Verdict           string     `json:"verdict,omitempty"`
}

// FindKnee analyses one ladder. Points need not be sorted; points with equal
// load are averaged by the caller beforehand (the ladder has one step per load).
func FindKnee(target, ladder string, pts []LadderPoint, o KneeOptions) Knee {
	o = o.withDefaults()
	p := append([]LadderPoint(nil), pts...)
	sort.SliceStable(p, func(i, j int) bool { return p[i].Load < p[j].Load })
	k := Knee{Target: target, Ladder: ladder, Steps: len(p)}
	if len(p) == 0 {
		return k
	}
	for _, q := range p {
		if q.Throughput > k.MaxThroughput {
			k.MaxThroughput, k.MaxThroughputAt = q.Throughput, q.Load
		}
	}

	tk := throughputKnee(p, o.MinGain)
	if tk >= 0 {
		k.ThroughputKnee = ptr(p[tk].Load)
	}
	lk, metric := latencyKnee(p, o.LatencyFactor, o.QueueShare)
	if lk >= 0 {
		k.LatencyKnee, k.LatencyMetric = ptr(p[lk].Load), metric
	}
	loads := make([]float64, len(p))
	e2e := make([]float64, len(p))
	for i, q := range p {
		loads[i], e2e[i] = q.Load, q.E2EP99
	}
	if e := Kneedle(loads, e2e, Convex); e >= 0 {
		k.LatencyElbow = ptr(loads[e])
	}

	best := -1
	for i, q := range p {
		if tk >= 0 && i > tk {
			break
		}
		if lk >= 0 && i >= lk {
			break
		}
		if q.MeetsSLO && q.ErrorRate <= o.MaxErrorRate {
			best = i
		}
	}
	if best >= 0 {
		k.BestOperatingPoint = ptr(p[best].Load)
		k.BestThroughput = p[best].Throughput
	}
	return k
}

// throughputKnee returns the index of the lowest load past which
// throughput never again gains MinGain × the initial slope per added load
// unit — measured from that load to every higher one, not only to the next,
// so one noisy step neither hides a knee nor fakes one — or -1 when
// throughput kept growing to the top of the ladder. The initial slope is
// taken from the origin (no load, no throughput) to the first step, which
// holds for both ladder kinds and needs only one step.
func throughputKnee(p []LadderPoint, minGain float64) int {
	if len(p) < 2 {
		return -1
	}
	var s0 float64
	if p[0].Load > 0 {
		s0 = p[0].Throughput / p[0].Load
	} else {
		s0 = slope(p[0], p[1])
	}
	if s0 <= 0 || math.IsNaN(s0) {
		return -1
	}
	for i := 0; i < len(p)-1; i++ {
		flat := true
		for j := i + 1; j < len(p) && flat; j++ {
			flat = slope(p[i], p[j]) < minGain*s0
		}
		if flat {
			return i
		}
	}
	return -1
}

func slope(a, b LadderPoint) float64 {
	if b.Load == a.Load {
		return math.Inf(1)
	}
	return (b.Throughput - a.Throughput) / (b.Load - a.Load)
}

// latencyKnee returns the first index from which TTFT or E2E P99 stays
// beyond its threshold for every higher load, and the metric's name.
// Requiring the excess to persist keeps one noisy step from passing for a
// knee: a real takeoff only gets worse with more load. TTFT's threshold is
// its lowest-load value plus queueShare × the lowest-load E2E P99 (factor ×
// the TTFT when no E2E is known); E2E's is factor × its lowest-load value.
func latencyKnee(p []LadderPoint, factor, queueShare float64) (int, string) {
	base := func(get func(LadderPoint) float64) float64 {
		for _, q := range p {
			if v := get(q); v > 0 {
				return v
			}
		}
		return math.NaN()
	}
	ttft := func(q LadderPoint) float64 { return q.TTFTP99 }
	e2e := func(q LadderPoint) float64 { return q.E2EP99 }
	first := func(get func(LadderPoint) float64, limit float64) int {
		if math.IsNaN(limit) {
			return -1
		}
		knee := -1
		for i, q := range p {
			switch v := get(q); {
			case !(v > 0):
			case v > limit:
				if knee < 0 {
					knee = i
				}
			default:
				knee = -1
			}
		}
		return knee
	}
	bt, be := base(ttft), base(e2e)
	tLimit := bt * factor
	if !math.IsNaN(be) {
		tLimit = bt + queueShare*be
	}
	t := first(ttft, tLimit)
	e := first(e2e, factor*be)
	switch {
	case t < 0 && e < 0:
		return -1, ""
	case e < 0 || (t >= 0 && t <= e):
		return t, "ttft_p99"
	default:
		return e, "e2e_p99"
	}
}

// Curve shapes for Kneedle.
const (
	Concave = iota // increasing and flattening: throughput vs load
	Convex         // increasing and steepening: latency vs load
)

// Kneedle finds the knee (Concave) or elbow (Convex) of an increasing curve
// by the Kneedle method (Satopää et al., ICDCS 2011): normalise x and y to
// [0,1] and take the point farthest from the diagonal on the curve's side.
// x must be ascending. It returns -1 when the curve is too short, not
// increasing, moves less than 10 % of its size (noise around a level), or
// never departs from the diagonal by more than 0.1 (a straight line has no
// knee).
func Kneedle(x, y []float64, shape int) int {
	n := len(x)
	if n < 3 || len(y) != n {
		return -1
	}
	x0, x1 := x[0], x[n-1]
	y0, y1 := math.Inf(1), math.Inf(-1)
	for _, v := range y {
		if math.IsNaN(v) {
			return -1
		}
		y0, y1 = math.Min(y0, v), math.Max(y1, v)
	}
	// A curve that barely moves (noise around a level) or does not rise
	// end to end has no knee to speak of.
	if x1 <= x0 || y1-y0 < 0.1*math.Abs(y1) || y[n-1]-y[0] < 0.5*(y1-y0) {
		return -1
	}
	best, bestD := -1, 0.1
	for i := range x {
		xn := (x[i] - x0) / (x1 - x0)
		yn := (y[i] - y0) / (y1 - y0)
		d := yn - xn
		if shape == Convex {
			d = xn - yn
		}
		if d > bestD {
			best, bestD = i, d
		}
	}
	return best
}

func ptr(v float64) *float64 { return &v }
