package netem

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// TestShaperSchedule checks delivery times exactly, in virtual time.
func TestShaperSchedule(t *testing.T) {
	t.Parallel()
	type read struct {
		at time.Duration // read time after connection start
		n  int
	}
	type want struct {
		deliver time.Duration
		pass    int
		reset   bool
	}
	cases := []struct {
		name  string
		d     Direction
		reads []read
		want  []want
	}{
		// Zero value: delivered as read.
		{"passthrough", Direction{}, []read{{0, 100}, {ms(5), 100}},
			[]want{{0, 100, false}, {ms(5), 100, false}}},
		// Latency is added to each chunk's read time, not accumulated.
		{"latency", Direction{Latency: ms(50)}, []read{{0, 10}, {ms(1), 10}, {ms(100), 10}},
			[]want{{ms(50), 10, false}, {ms(51), 10, false}, {ms(150), 10, false}}},
		// 10 kB/s: 1000-byte chunks read together leave 100 ms apart, and
		// latency adds once on top (composition, not n × latency).
		{
			"bandwidth then latency",
			Direction{Latency: ms(50), Bandwidth: 10_000},
			[]read{{0, 1000}, {0, 1000}, {0, 1000}},
			[]want{{ms(150), 1000, false}, {ms(250), 1000, false}, {ms(350), 1000, false}},
		},
		// An idle link does not bank time without a burst: a late chunk
		// still takes its own transmission time.
		{"no credit without burst", Direction{Bandwidth: 10_000}, []read{{0, 1000}, {ms(500), 1000}},
			[]want{{ms(100), 1000, false}, {ms(600), 1000, false}}},
		// A 2000-byte bucket lets two chunks through at once; the third waits.
		{"burst", Direction{Bandwidth: 10_000, Burst: 2000}, []read{{0, 1000}, {0, 1000}, {0, 1000}},
			[]want{{0, 1000, false}, {0, 1000, false}, {ms(100), 1000, false}}},
		// Periodic stall: link down in [100, 130) ms; a chunk read at 110 ms
		// leaves at 130; one read before the window is untouched.
		{
			"periodic stall",
			Direction{StallEvery: ms(100), StallFor: ms(30)},
			[]read{{ms(90), 1}, {ms(110), 1}, {ms(140), 1}},
			[]want{{ms(90), 1, false}, {ms(130), 1, false}, {ms(140), 1, false}},
		},
		// Stall probability 1: each chunk waits StallFor after the previous.
		{"random stall", Direction{StallProb: 1, StallFor: ms(20)}, []read{{0, 1}, {0, 1}},
			[]want{{ms(20), 1, false}, {ms(40), 1, false}}},
		// Reset after 2500 bytes: the third chunk is cut to 500 and resets;
		// anything read afterwards is never delivered.
		{"reset after bytes", Direction{ResetAfter: 2500}, []read{{0, 1000}, {0, 1000}, {0, 1000}, {0, 1000}},
			[]want{{0, 1000, false}, {0, 1000, false}, {0, 500, true}, {0, 0, true}}},
		// Reset probability 1: reset before the first byte.
		{"reset prob", Direction{ResetProb: 1}, []read{{ms(3), 100}},
			[]want{{ms(3), 0, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShaper(c.d, 1, t0)
			for i, r := range c.reads {
				v := s.schedule(t0.Add(r.at), r.n)
				w := c.want[i]
				if got := v.deliver.Sub(t0); got != w.deliver || v.pass != w.pass || v.reset != w.reset {
					t.Errorf(
						"read %d: deliver %v pass %d reset %v; want %v %d %v",
						i,
						got,
						v.pass,
						v.reset,
						w.deliver,
						w.pass,
						w.reset,
					)
				}
			}
		})
	}
}

// TestShaperJitter: delays stay within latency ± jitter except where order
// forces a later time, order is kept, and the same seed repeats exactly.
func TestShaperJitter(t *testing.T) {
	t.Parallel()
	d := Direction{Latency: ms(50), Jitter: ms(10)}
	a := newShaper(d, 7, t0)
	b := newShaper(d, 7, t0)
	other := newShaper(d, 8, t0)
	var prev time.Time
	differ := false
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for i := range 2000 {
		at := t0.Add(time.Duration(i) * ms(5))
		va := a.schedule(at, 1)
		vb := b.schedule(at, 1)
		vo := other.schedule(at, 1)
		if !va.deliver.Equal(vb.deliver) {
			t.Fatalf("chunk %d: same seed, different times", i)
		}
		differ = differ || !va.deliver.Equal(vo.deliver)
		if va.deliver.Before(prev) {
			t.Fatalf("chunk %d reordered", i)
		}
		delay := va.deliver.Sub(at)
		if delay > d.Latency+d.Jitter || (delay < d.Latency-d.Jitter && !va.deliver.Equal(prev)) {
			t.Fatalf("chunk %d delay %v outside %v ± %v", i, delay, d.Latency, d.Jitter)
		}
		lo, hi = min(lo, delay), max(hi, delay)
		prev = va.deliver
	}
	if !differ {
		t.Error("seeds 7 and 8 gave identical jitter")
	}
	// 2000 uniform draws reach within 10% of both ends.
	if lo > d.Latency-d.Jitter*9/10 || hi < d.Latency+d.Jitter*9/10 {
		t.Errorf("delays span [%v, %v], want close to [%v, %v]", lo, hi, d.Latency-d.Jitter, d.Latency+d.Jitter)
	}
}

// FuzzShaper checks the shaper's invariants over arbitrary directions and
// read patterns: nothing is delivered before it was read, deliveries never
// go back in time, no more bytes pass than were read, and after a reset
// nothing more passes.
func FuzzShaper(f *testing.F) {
	f.Add(
		int64(ms(5)),
		int64(ms(2)),
		1e4,
		100,
		int64(ms(50)),
		int64(ms(5)),
		0.1,
		int64(5000),
		0.01,
		[]byte{10, 200, 3, 90},
	)
	f.Add(int64(0), int64(ms(20)), 0.0, 0, int64(0), int64(0), 0.0, int64(0), 0.0, []byte{1, 1, 1})
	f.Fuzz(
		func(t *testing.T, lat, jit int64, bw float64, burst int, every, stall int64, stallP float64, resetAfter int64, resetP float64, reads []byte) {
			d := Direction{Latency: time.Duration(lat), Jitter: time.Duration(jit), Bandwidth: bw, Burst: burst,
				StallEvery: time.Duration(
					every,
				), StallFor: time.Duration(stall), StallProb: stallP, ResetAfter: resetAfter, ResetProb: resetP}
			if (Config{Up: d}).Validate() != nil || d.Latency > time.Hour || d.Jitter > time.Hour ||
				d.StallFor > time.Hour ||
				(bw > 0 && bw < 1) {
				return
			}
			s := newShaper(d, 3, t0)
			at, prev := t0, t0
			reset := false
			var passed int64
			for i, r := range reads {
				at = at.Add(time.Duration(r) * time.Millisecond / 4)
				n := int(r)*7 + 1
				v := s.schedule(at, n)
				if v.deliver.Before(at) || v.deliver.Before(prev) {
					t.Fatalf(
						"read %d at %v delivered at %v (previous %v)",
						i,
						at.Sub(t0),
						v.deliver.Sub(t0),
						prev.Sub(t0),
					)
				}
				if v.pass < 0 || v.pass > n || (reset && v.pass != 0) {
					t.Fatalf("read %d: pass %d of %d (reset before: %v)", i, v.pass, n, reset)
				}
				passed += int64(v.pass)
				if d.ResetAfter > 0 && passed > d.ResetAfter {
					t.Fatalf("%d bytes passed, reset after %d", passed, d.ResetAfter)
				}
				prev, reset = v.deliver, reset || v.reset
			}
			checkLoss(t, Direction{Latency: d.Latency, Bandwidth: d.Bandwidth, Loss: resetP}, reads)
		},
	)
}

// checkLoss replays reads through a lossy shaper (loss below 1): a chunk
// is never delivered before it was read nor before the previous one, loses
// no more segments than it has, and counts no more RTOs than losses.
func checkLoss(t *testing.T, d Direction, reads []byte) {
	if !(d.Loss >= 0 && d.Loss < 1) || (Config{Up: d}).Validate() != nil || (d.Bandwidth > 0 && d.Bandwidth < 1) {
		return
	}
	s := newShaper(d, 5, t0)
	s.rtt, s.rto = 2*d.Latency, 2*d.Latency+MinRTO
	at, prev := t0, t0
	for i, r := range reads {
		at = at.Add(time.Duration(r) * time.Millisecond / 4)
		n := int(r)*37 + 1
		v := s.schedule(at, n)
		segs := (n + SegmentSize - 1) / SegmentSize
		if v.deliver.Before(at) || v.deliver.Before(prev) || v.lost > segs || v.rtos > v.lost {
			t.Fatalf("read %d of %d bytes: delivered at %v (read %v, previous %v), lost %d, RTOs %d",
				i, n, v.deliver.Sub(t0), at.Sub(t0), prev.Sub(t0), v.lost, v.rtos)
		}
		prev = v.deliver
	}
}
