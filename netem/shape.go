package netem

import (
	"math/rand/v2"
	"time"
)

// shaper computes, for one direction of one connection, when each chunk
// read is to be delivered. It is pure bookkeeping on absolute times — no
// sockets, no sleeping — so it is tested exactly.
type shaper struct {
	d     Direction
	rng   *rand.Rand
	start time.Time // connection start: origin of the periodic stall windows

	tokens      float64   // token bucket level, bytes
	bucketAt    time.Time // time tokens was last brought up to date; link busy until then
	lastDeliver time.Time
	passed      int64 // bytes let through so far
	resetDone   bool
	// rtt and rto are the connection's round trip and retransmission
	// timeout: what a lost segment costs (loss.go).
	rtt, rto time.Duration
}

func newShaper(d Direction, seed uint64, start time.Time) *shaper {
	return &shaper{
		d:        d,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		start:    start,
		bucketAt: start,
		tokens:   float64(d.Burst),
	}
}

// verdict is what happens to one chunk.
type verdict struct {
	deliver time.Time // absolute time to write it
	pass    int       // bytes of the chunk to write (less than read when a reset cuts it)
	reset   bool      // reset the connection after writing pass bytes
	stalled bool      // a stall (random or periodic) held this chunk back
	lost    int       // segments of the chunk lost and retransmitted
	rtos    int       // of them, those recovered only by the retransmission timeout
}

// schedule decides the fate of n bytes read at time t. Calls come in
// reading order with non-decreasing t.
func (s *shaper) schedule(t time.Time, n int) verdict {
	var v verdict
	if s.resetDone {
		// The connection is gone: nothing passes. (The pipe stops reading
		// at the first reset; this only keeps the verdict consistent.)
		return verdict{deliver: maxTime(t, s.lastDeliver), reset: true}
	}
	v.pass = n
	// Resets: after a byte count, or at random before this chunk.
	if s.d.ResetAfter > 0 && s.passed+int64(n) >= s.d.ResetAfter {
		v.pass, v.reset = int(s.d.ResetAfter-s.passed), true
	} else if s.d.ResetProb > 0 && s.rng.Float64() < s.d.ResetProb {
		v.pass, v.reset = 0, true
	}
	s.passed += int64(v.pass)
	s.resetDone = v.reset

	// The link takes the chunk no earlier than it was read, nor before it
	// finished the previous one.
	begin := t
	if s.bucketAt.After(begin) {
		begin = s.bucketAt
	}
	if s.d.StallProb > 0 && s.rng.Float64() < s.d.StallProb {
		begin = begin.Add(s.d.StallFor)
		v.stalled = true
	}
	depart := begin
	if s.d.Bandwidth > 0 {
		// Token bucket in virtual time: refill for the idle time, up to
		// Burst; a chunk larger than the tokens waits for the rest.
		s.tokens += begin.Sub(s.bucketAt).Seconds() * s.d.Bandwidth
		if s.tokens > float64(s.d.Burst) {
			s.tokens = float64(s.d.Burst)
		}
		need := float64(v.pass) - s.tokens
		if need > 0 {
			depart = begin.Add(time.Duration(need / s.d.Bandwidth * float64(time.Second)))
			s.tokens = 0
		} else {
			s.tokens -= float64(v.pass)
		}
	}
	if d := s.afterStallWindow(depart); d != depart {
		depart, v.stalled = d, true
	}
	s.bucketAt = depart

	deliver := depart.Add(s.d.Latency + s.lose(&v))
	if s.d.Jitter > 0 {
		j := time.Duration((s.rng.Float64()*2 - 1) * float64(s.d.Jitter))
		deliver = deliver.Add(j)
		if deliver.Before(depart) {
			deliver = depart // jitter never makes bytes arrive before they left
		}
	}
	if deliver.Before(s.lastDeliver) {
		deliver = s.lastDeliver // never reorder
	}
	s.lastDeliver = deliver
	v.deliver = deliver
	return v
}

// afterStallWindow moves t out of a periodic stall: the link is down during
// [k·StallEvery, k·StallEvery+StallFor) after the connection start, k ≥ 1.
func (s *shaper) afterStallWindow(t time.Time) time.Time {
	if s.d.StallEvery <= 0 || s.d.StallFor <= 0 {
		return t
	}
	el := t.Sub(s.start)
	k := el / s.d.StallEvery
	if k < 1 {
		return t
	}
	if phase := el - k*s.d.StallEvery; phase < s.d.StallFor {
		return t.Add(s.d.StallFor - phase)
	}
	return t
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lose draws the loss of each TCP segment of the chunk's bytes and returns
// how late the chunk arrives for it. A lost segment with at least three
// segments behind it in the chunk brings three duplicate ACKs, so the
// sender retransmits it after one round trip (fast retransmit, RFC 5681);
// one near the end of a burst — the usual case for a token stream, whose
// events are one small segment each — waits for the retransmission
// timeout. Several losses in one chunk overlap: it waits for the longest.
func (s *shaper) lose(v *verdict) time.Duration {
	if s.d.Loss <= 0 || v.pass <= 0 {
		return 0
	}
	segs := (v.pass + SegmentSize - 1) / SegmentSize
	var late time.Duration
	for i := range segs {
		if s.rng.Float64() >= s.d.Loss {
			continue
		}
		v.lost++
		if segs-i-1 >= 3 {
			late = max(late, s.rtt)
			continue
		}
		v.rtos++
		late = max(late, s.rto)
	}
	return late
}
