package calibration

import (
	"fmt"
	"math"
	"sort"

	"testbed/harness"
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
// chunks as wide as the gap, so the bursts are repaired with the lockstep
// rule that a running sequence gets exactly one token per step: a burst
// holding two chunks of one request is split at its widest gap, and a
// burst whose requests all seem to have skipped the step before it is that
// step's late tail and rejoins it.
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
}

// Batch is the number of sequences the step served.
func (s step) Batch() int { return s.Prefills + s.Decode }

// streamReq is one request usable for reconstruction.
type streamReq struct {
	rec    *harness.Record
	times  []int64 // chunk arrivals
	first  int     // burst of the first chunk
	last   int     // burst of the last chunk
	tokens int     // N_out
}

// splitCoarse splits every burst holding two chunks of one request at its
// widest internal gap, until none does: in lockstep batching a sequence
// gets one token per step, so such a burst is two steps whose arrivals ran
// together (a busy server or client spreads a step's writes or reads).
// cuts are the bursts' first arrivals; the new cuts and the number of
// splits are returned.
func splitCoarse(times []int64, reqOf []int32, cuts []int, nreq int) ([]int, int) {
	mark := make([]int, nreq) // burst id + 1 in which the request was last seen
	id := 0
	splits := 0
	var out []int
	// Work through bursts in order; a split pushes its second half back.
	stack := make([][2]int, 0, 8)
	for b := len(cuts) - 1; b >= 0; b-- {
		end := len(times)
		if b+1 < len(cuts) {
			end = cuts[b+1]
		}
		stack = append(stack, [2]int{cuts[b], end})
	}
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		id++
		// The first request seen twice: the cut must fall between its two
		// chunks, at the widest gap there.
		first, second := -1, -1
		for i := r[0]; i < r[1]; i++ {
			if mark[reqOf[i]] == id {
				second = i
				for j := r[0]; j < i; j++ {
					if reqOf[j] == reqOf[i] {
						first = j
						break
					}
				}
				break
			}
			mark[reqOf[i]] = id
		}
		if second < 0 {
			out = append(out, r[0])
			continue
		}
		at, widest := second, int64(-1)
		for i := first + 1; i <= second; i++ {
			if g := times[i] - times[i-1]; g > widest {
				at, widest = i, g
			}
		}
		splits++
		stack = append(stack, [2]int{at, r[1]}, [2]int{r[0], at})
	}
	return out, splits
}

// rejoinLate merges into the burst before it every burst that can only be
// the late tail of that one: it shares no request with it, some of its
// requests skipped that burst (their previous chunk is older), and it
// followed within less than a short step. In lockstep batching a running
// sequence never skips a step, so a chunk that seems to is a chunk of the
// step before that the client read late (a busy client, a GC pause, a
// loaded network). reqOf gives each arrival's request; burstOf is rewritten
// in place; the merged ends and the number of merged bursts are returned.
func rejoinLate(reqOf []int32, burstOf []int, ends []int64, within int64, nreq int) ([]int64, int) {
	last := make([]int, nreq) // kept burst of the request's latest chunk, +1
	var kept []int64
	remap := make([]int, len(ends))
	merged := 0
	for i := 0; i < len(reqOf); {
		b := burstOf[i]
		j := i
		for j < len(reqOf) && burstOf[j] == b {
			j++
		}
		p := len(kept) - 1
		join := false
		if p >= 0 && ends[b]-kept[p] < within {
			clash, skipped := false, false
			for _, r := range reqOf[i:j] {
				switch lb := last[r] - 1; {
				case lb == p:
					clash = true
				case lb >= 0 && lb < p:
					skipped = true
				}
			}
			join = !clash && skipped
		}
		if join {
			remap[b] = p
			merged++
		} else {
			kept = append(kept, ends[b])
			remap[b] = len(kept) - 1
		}
		for _, r := range reqOf[i:j] {
			last[r] = remap[b] + 1
		}
		i = j
	}
	for i := range burstOf {
		burstOf[i] = remap[burstOf[i]]
	}
	return kept, merged
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
	Skipped    map[string]int

	// Queueing: requests that waited at least two whole steps after arrival
	// before their prompt was computed, and the batch sizes they waited behind.
	Queued       int
	QueuedBehind []int
	MaxBatch     int
}

// reconstruct builds the step timeline from records of one target. gapNS
// overrides the burst threshold when > 0.
func reconstruct(recs []harness.Record, gapNS int64) (*reconstruction, error) {
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
			med = append(med, quantile(g, 0.5))
		}
		if len(med) == 0 {
			return nil, fmt.Errorf("no request streamed more than one chunk: steps cannot be told apart")
		}
		gapNS = int64(0.5 * quantile(med, 0.10))
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
	var cuts []int // first arrival of each burst
	for i := range all {
		if i == 0 || times[i]-times[i-1] > gapNS {
			cuts = append(cuts, i)
		}
	}
	cuts, rc.Split = splitCoarse(times, reqOf, cuts, len(reqs))
	var ends []int64
	burstOf := make([]int, len(all))
	for b, c := range cuts {
		ends = append(ends, times[c])
		next := len(all)
		if b+1 < len(cuts) {
			next = cuts[b+1]
		}
		for i := c; i < next; i++ {
			burstOf[i] = b
		}
	}
	ends, rc.Rejoined = rejoinLate(reqOf, burstOf, ends, 2*gapNS, len(reqs))
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
		s.End, s.Decode = ends[k], running
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
