package fit

import (
	"fmt"
	"math"
	"sort"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// Step reconstruction: a continuous-batching server (vLLM, TGI, the mock's
// engine mode) samples one token for every running sequence at the end of
// each step, so the token chunks of all streams arrive at the client in
// bursts, one burst per step. Sorting every chunk arrival of a run and
// cutting where the gap exceeds a threshold recovers the steps; then for
// each step k:
//
//	end_k     = earliest chunk arrival of the burst
//	decode_k  = requests that already had their first token and had not
//	            yet received their last (every running sequence gets one
//	            token per step, so a request counts in every step between
//	            its first and last chunk, whether or not a chunk of its own
//	            fell in that burst)
//	prefill_k = prompt tokens of the requests whose first token came with
//	            this burst (their prompt was computed in this step)
//	start_k   = end_{k-1} when the engine was busy (some request was
//	            decoding or waiting), else the send time of the earliest
//	            request whose prompt this step computed (the engine sat
//	            idle until it arrived)
//
// and end_k − start_k = β0 + β1·prefill_k + β2·decode_k is one row of a
// linear least-squares fit. A request whose first and last chunks lie
// N_out − 1 bursts apart agrees with the reconstruction; the share that
// agree is its check.
//
// The gap rule alone fails when a busy server or client spreads a step's
// chunks as wide as the gap, or pauses and then writes several steps at
// once, so the bursts are repaired with the lockstep rule that a running
// sequence gets exactly one token per step (bursts.go): a burst holding
// two chunks of one request is split, and a burst whose requests all seem
// to have skipped the step before it is that step's late tail and rejoins it.
//
// Assumptions, each a limit of the method: the server batches in lockstep
// (vLLM, TGI, the mock; not a server that paces streams independently);
// a prompt is computed in one step (prompts within the token budget; a
// chunked prefill's earlier steps are charged to its last); no preemption;
// the per-context term β3 is taken as 0; and the client reads each chunk
// soon after it is written, so bursts stay narrower than a step.

// step is one engine step as the client saw it.
type step struct {
	Start    int64 // ns since run start
	End      int64
	Idle     bool // the engine was idle before it: Start is a request's send time
	Prefill  int  // prompt tokens computed in the step
	Prefills int  // requests whose first token the step produced
	Decode   int  // requests decoding during the step
	// Stall marks a step seen only through a catch-up: after a pause the
	// server wrote several steps' tokens at once, so when this step ended
	// is not observable (its row and the next one's are left out of the fit).
	Stall bool
}

// Batch is the number of sequences the step served.
func (s step) Batch() int { return s.Prefills + s.Decode }

// streamReq is one request usable for reconstruction.
type streamReq struct {
	rec    *results.Record
	times  []int64 // chunk arrivals
	first  int     // burst of the first chunk
	last   int     // burst of the last chunk
	tokens int     // N_out
}

// reconstruction is the step timeline of one target's run.
type reconstruction struct {
	Steps      []step
	GapNS      int64 // bursts are cut where chunk arrivals are further apart than this
	Requests   int   // requests used
	Consistent int   // of them, those whose span is exactly N_out − 1 steps
	Merged     int   // of them, those with two chunks in one burst (bursts too coarse)
	Rejoined   int   // bursts merged back into the one before as its late tail
	Split      int   // bursts split because they held two chunks of one request
	CatchUps   int   // bursts where a pause made the server write several steps at once
	Skipped    map[string]int

	// Queueing: requests that waited at least two whole steps after arrival
	// before their prompt was computed, and the batch sizes they waited behind.
	Queued       int
	QueuedBehind []int
	MaxBatch     int
}

// reconstruct builds the step timeline from records of one target. gapNS
// overrides the burst threshold when > 0.
func reconstruct(recs []results.Record, gapNS int64) (*reconstruction, error) {
	rc := &reconstruction{Skipped: map[string]int{}}
	var reqs []streamReq
	for i := range recs {
		r := &recs[i]
		switch {
		case !r.Stream:
			rc.Skipped["not streamed (no per-token times)"]++
			continue
		case r.FirstTokenNS == 0:
			rc.Skipped["no token received"]++
			continue
		case r.SentNS == 0:
			rc.Skipped["no send time"]++
			continue
		}
		n := r.NOut
		if n == 0 {
			n = r.NOutCounted
		}
		if !r.OK() {
			// A cut stream ran until its last chunk; count what arrived.
			n = r.NOutCounted
		}
		if n <= 0 {
			rc.Skipped["no output tokens"]++
			continue
		}
		reqs = append(reqs, streamReq{rec: r, times: r.ChunkTimes(), tokens: n})
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no streamed request with token times (skipped: %v)", rc.Skipped)
	}
	rc.Requests = len(reqs)

	if gapNS <= 0 {
		// Each request's median chunk gap is about one step; the 10th
		// percentile of those is about the shortest step; half of it
		// separates bursts while tolerating the spread of arrivals within one.
		var med []float64
		for _, q := range reqs {
			if len(q.times) < 2 {
				continue
			}
			g := make([]float64, 0, len(q.times)-1)
			for i := 1; i < len(q.times); i++ {
				g = append(g, float64(q.times[i]-q.times[i-1]))
			}
			med = append(med, analysis.Quantile(g, 0.5))
		}
		if len(med) == 0 {
			return nil, fmt.Errorf("no request streamed more than one chunk: steps cannot be told apart")
		}
		gapNS = int64(0.5 * analysis.Quantile(med, 0.10))
		if gapNS < 50_000 {
			gapNS = 50_000 // 50 µs: below that, bursts and jitter are indistinguishable
		}
	}
	rc.GapNS = gapNS

	// Every chunk arrival, sorted, cut into bursts.
	type arrival struct {
		t   int64
		req int32
	}
	var all []arrival
	for i, q := range reqs {
		for _, t := range q.times {
			all = append(all, arrival{t, int32(i)})
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a].t < all[b].t })
	// A burst's end is its earliest arrival: the chunk that met the least
	// delay between the server's write and the client's read.
	times := make([]int64, len(all))
	reqOf := make([]int32, len(all))
	for i, a := range all {
		times[i], reqOf[i] = a.t, a.req
	}
	bs := cutBursts(times, gapNS)
	bs, rc.Split, rc.CatchUps = splitCoarse(times, reqOf, bs, len(reqs), gapNS/5)
	bs, rc.Rejoined = rejoinLate(reqOf, bs, 2*gapNS, len(reqs))
	ends := make([]int64, len(bs))
	burstOf := make([]int, len(all))
	for b, x := range bs {
		ends[b] = x.end
		for _, i := range x.members {
			burstOf[i] = b
		}
	}
	for i := range reqs {
		reqs[i].first, reqs[i].last = -1, -1
	}
	seen := make([]int, len(reqs)) // last burst a chunk of the request fell in, +1
	merged := make([]bool, len(reqs))
	for i, a := range all {
		q := &reqs[a.req]
		b := burstOf[i]
		if q.first < 0 {
			q.first = b
		}
		q.last = b
		if seen[a.req] == b+1 {
			merged[a.req] = true
		}
		seen[a.req] = b + 1
	}

	K := len(ends)
	steps := make([]step, K)
	decodeDelta := make([]int, K+1)
	minSent := make([]int64, K)
	for k := range minSent {
		minSent[k] = math.MaxInt64
	}
	for i, q := range reqs {
		if merged[i] {
			rc.Merged++
		}
		if q.last-q.first == q.tokens-1 {
			rc.Consistent++
		}
		steps[q.first].Prefill += q.rec.NIn
		steps[q.first].Prefills++
		minSent[q.first] = min(minSent[q.first], q.rec.SentNS)
		decodeDelta[q.first+1]++
		decodeDelta[q.last+1]--
	}
	running := 0
	for k := range steps {
		running += decodeDelta[k]
		s := &steps[k]
		s.End = ends[k]
		s.Decode = running
		s.Stall = bs[k].stall
		switch {
		case k > 0 && s.Decode > 0:
			s.Start = ends[k-1]
		case k > 0 && minSent[k] < ends[k-1]:
			s.Start = ends[k-1] // its request waited while the last one finished
		default:
			s.Start, s.Idle = minSent[k], true
		}
		rc.MaxBatch = max(rc.MaxBatch, s.Batch())
	}
	rc.Steps = steps

	// Requests that waited two or more whole steps after they were sent.
	for _, q := range reqs {
		arr := sort.Search(K, func(k int) bool { return ends[k] >= q.rec.SentNS })
		if q.first-arr-1 >= 2 {
			rc.Queued++
			for k := arr + 1; k < q.first; k++ {
				rc.QueuedBehind = append(rc.QueuedBehind, steps[k].Batch())
			}
		}
	}
	return rc, nil
}
