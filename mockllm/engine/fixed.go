package engine

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// fixedScheduler gives every request the profile's TTFT and ITL, computed
// arithmetically from its arrival: no goroutine or timer per request, and
// no lock on the per-token path. In load_curve mode (curve set) it draws
// them from the curve at the number of requests in flight instead.
type fixedScheduler struct {
	p     Profile
	clock Clock
	seed  uint64
	curve *curve // load_curve mode; nil in fixed mode

	// inFlight counts open streams, read without the lock per token
	// (load_curve mode; see loadcurve.go).
	inFlight atomic.Int64

	mu      sync.Mutex
	started bool      // a request has arrived since New
	warmAt  time.Time // end of the current cold start
	lastEnd time.Time // when the last active stream closed
	active  int
	closed  atomic.Bool
	anon    uint64 // sequence for requests without an ID

	prompt  atomic.Uint64
	decoded atomic.Uint64
}

func newFixed(p Profile, o options) *fixedScheduler {
	s := &fixedScheduler{p: p, clock: o.clock, seed: uint64(o.seed)}
	if p.Mode == ModeLoadCurve {
		s.curve = newCurve(p.LoadCurve)
	}
	return s
}

// Start admits req at once; only a cold start delays its first token.
func (s *fixedScheduler) Start(ctx context.Context, req Request) (Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkRequest(s.p, req, 0); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	cold := !s.started || (s.p.IdleTimeout > 0 && s.active == 0 && now.Sub(s.lastEnd) >= s.p.IdleTimeout)
	if cold && s.p.ColdStart > 0 {
		s.warmAt = now.Add(s.p.ColdStart)
	}
	s.started = true
	// TTFT counts from the request's arrival at the server, not from
	// Start: the HTTP layer's parsing and checks are part of it.
	begin := now.Add(-min(max(req.Waited, 0), time.Second))
	if s.warmAt.After(begin) {
		begin = s.warmAt
	}
	s.active++
	s.anon++
	anon := s.anon
	n := s.inFlight.Add(1)
	s.mu.Unlock()
	s.prompt.Add(uint64(req.PromptTokens))

	st := &fixedStream{s: s, n: req.OutputTokens, begin: begin, next: begin}
	switch {
	case s.curve != nil:
		st.pcg.Seed(s.seed, requestKey(req.ID, anon))
		st.ttft = s.curve.ttftAt(int(n), req.PromptTokens, unitFloat(st.pcg.Uint64()))
	case s.p.Jitter.enabled():
		st.jit = newJitterSampler(s.p.Jitter, s.seed, requestKey(req.ID, anon))
	}
	return st, nil
}

// requestKey hashes a request's ID so its jitter does not depend on arrival
// order; requests without an ID fall back to their arrival sequence.
func requestKey(id string, seq uint64) uint64 {
	if id == "" {
		return seq
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// Stats counts open streams as running; fixed mode has no queue or cache.
func (s *fixedScheduler) Stats() Stats {
	s.mu.Lock()
	running := s.active
	s.mu.Unlock()
	return Stats{Running: running, PromptTokens: s.prompt.Load(), DecodedTokens: s.decoded.Load()}
}

// Close makes open streams and later Starts fail with ErrClosed.
func (s *fixedScheduler) Close() { s.closed.Store(true) }

// release ends one stream's claim on the scheduler.
func (s *fixedScheduler) release() {
	now := s.clock.Now()
	s.mu.Lock()
	s.active--
	if now.After(s.lastEnd) {
		s.lastEnd = now
	}
	s.mu.Unlock()
}

// fixedStream computes each token's due time from the previous one.
type fixedStream struct {
	s      *fixedScheduler
	n      int // tokens to generate
	i      int // next token index
	begin  time.Time
	next   time.Time // due time of the previous token, then of token i
	jit    *jitterSampler
	closed bool
	left   bool // taken out of the in-flight count

	// load_curve mode: the stream's own generator and its drawn TTFT.
	pcg  rand.PCG
	ttft time.Duration
}

// Next returns token i due at begin+TTFT+i·ITL (each term jittered when
// configured). It never blocks: the caller sleeps until Due.
func (st *fixedStream) Next(ctx context.Context) (Token, bool, error) {
	if st.closed || st.s.closed.Load() {
		return Token{}, false, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Token{}, false, err
	}
	if st.i >= st.n {
		return Token{}, false, nil
	}
	gap := st.gap()
	st.next = st.next.Add(gap)
	tok := Token{Index: st.i, Due: st.next}
	st.i++
	st.s.decoded.Add(1)
	return tok, true, nil
}

// gap is the time from token i−1 (or the start) to token i.
func (st *fixedStream) gap() time.Duration {
	s := st.s
	switch {
	case s.curve != nil && st.i == 0:
		return st.ttft
	case s.curve != nil:
		return s.curve.itlAt(int(s.inFlight.Load()), unitFloat(st.pcg.Uint64()))
	case st.i == 0 && st.jit != nil:
		return st.jit.scale(s.p.TTFT)
	case st.i == 0:
		return s.p.TTFT
	case st.jit != nil:
		return st.jit.scale(s.p.ITL)
	}
	return s.p.ITL
}

// Dequeued is the arrival, or the end of a cold start the request waited for.
func (st *fixedStream) Dequeued() time.Time { return st.begin }

// Close releases the stream; calling it again does nothing.
func (st *fixedStream) Close() {
	if st.closed {
		return
	}
	st.closed = true
	st.leave()
	st.s.release()
}

// leave takes the stream out of the in-flight count, once.
func (st *fixedStream) leave() {
	if !st.left {
		st.left = true
		st.s.inFlight.Add(-1)
	}
}

// jitterSampler draws factors with mean 1 and stddev CV from one request's
// own generator.
type jitterSampler struct {
	dist   string
	cv     float64
	mu, sd float64 // lognormal parameters of the factor
	pcg    rand.PCG
	rng    *rand.Rand
}

func newJitterSampler(j Jitter, seed, key uint64) *jitterSampler {
	js := &jitterSampler{dist: j.Dist, cv: j.CV}
	js.pcg.Seed(seed, key)
	js.rng = rand.New(&js.pcg)
	if j.Dist == JitterLognormal {
		// For X = exp(μ+σZ): E[X] = 1 and CV(X) = cv need σ² = ln(1+cv²), μ = −σ²/2.
		s2 := math.Log1p(j.CV * j.CV)
		js.sd = math.Sqrt(s2)
		js.mu = -s2 / 2
	}
	return js
}

// factor draws one multiplier.
func (js *jitterSampler) factor() float64 {
	switch js.dist {
	case JitterNormal:
		return max(0, 1+js.cv*js.rng.NormFloat64())
	case JitterLognormal:
		return math.Exp(js.mu + js.sd*js.rng.NormFloat64())
	case JitterUniform:
		// U(−a, a) has stddev a/√3.
		return 1 + js.cv*math.Sqrt(3)*(2*js.rng.Float64()-1)
	}
	return 1
}

// scale multiplies d by one factor, rounding to the nanosecond.
func (js *jitterSampler) scale(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d) * js.factor()))
}
