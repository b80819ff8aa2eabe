package netem

import (
	"context"
	"io"
	"math"
	"net"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// TestShaperLoss checks what lost segments cost, in virtual time: a loss
// with three segments behind it is a fast retransmit (one RTT late), any
// other an RTO, and a chunk waits for its worst loss.
func TestShaperLoss(t *testing.T) {
	t.Parallel()
	const rtt, rto = 50 * time.Millisecond, 250 * time.Millisecond
	all := math.Nextafter(1, 0) // every draw below it: every segment lost
	cases := []struct {
		name      string
		loss      float64
		n         int           // bytes read at once
		deliver   time.Duration // after the read
		lost, rto int
	}{
		{"no loss", 0, 5 * SegmentSize, 25 * time.Millisecond, 0, 0},                      // latency only
		{"one segment lost", all, 100, 25*time.Millisecond + rto, 1, 1},                   // nothing behind it: RTO
		{"five segments lost", all, 5 * SegmentSize, 25*time.Millisecond + rto, 5, 3},     // two fast, three RTO
		{"partial last segment", all, 4*SegmentSize + 1, 25*time.Millisecond + rto, 5, 3}, // five segments
		{"empty chunk never lost", all, 0, 25 * time.Millisecond, 0, 0},                   // no segment
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShaper(Direction{Latency: 25 * time.Millisecond, Loss: c.loss}, 1, t0)
			s.rtt, s.rto = rtt, rto
			v := s.schedule(t0, c.n)
			if got := v.deliver.Sub(t0); got != c.deliver || v.lost != c.lost || v.rtos != c.rto {
				t.Errorf("deliver %v lost %d rtos %d; want %v %d %d", got, v.lost, v.rtos, c.deliver, c.lost, c.rto)
			}
		})
	}
	// A fast retransmit alone costs one RTT: find a seed whose first chunk
	// of ten segments loses exactly one with three behind it.
	for seed := range uint64(10_000) {
		s := newShaper(Direction{Loss: 0.05}, seed, t0)
		s.rtt, s.rto = rtt, rto
		if v := s.schedule(t0, 10*SegmentSize); v.lost == 1 && v.rtos == 0 {
			if got := v.deliver.Sub(t0); got != rtt {
				t.Errorf("seed %d: a lone fast retransmit delivers after %v, want %v", seed, got, rtt)
			}
			return
		}
	}
	t.Fatal("no lone fast retransmit in 10 000 seeds at 5 % loss")
}

// TestShaperLossRate: the share of segments lost matches the configured
// probability within four standard deviations of the binomial count.
func TestShaperLossRate(t *testing.T) {
	t.Parallel()
	const p, chunks = 0.02, 50_000
	s := newShaper(Direction{Loss: p}, 3, t0)
	lost := 0
	for range chunks {
		lost += s.schedule(t0, 1).lost
	}
	want := p * chunks
	sd := math.Sqrt(chunks * p * (1 - p))
	if math.Abs(float64(lost)-want) > 4*sd {
		t.Errorf("lost %d of %d one-segment chunks, want %.0f ± %.0f", lost, chunks, want, 4*sd)
	}
}

// TestProxyHandshake: with the handshake modelled, DialContext returns one
// round trip after it began and reports it as the connect to an
// httptrace; a plain client's first bytes still reach the server no
// earlier than a round trip after accept, plus the way up.
func TestProxyHandshake(t *testing.T) {
	t.Parallel()
	const lat = 25 * time.Millisecond
	cfg := Symmetric(Direction{Latency: lat})
	cfg.Handshake = true
	p := startProxy(t, echoServer(t), cfg)

	var started, done time.Time
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		ConnectStart: func(string, string) { started = time.Now() },
		ConnectDone:  func(string, string, error) { done = time.Now() },
	})
	t0 := time.Now()
	c, err := p.DialContext(ctx, "tcp", "server.example:443")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	c.Close()
	if took < 2*lat || took > 2*lat+20*raceSlack*time.Millisecond {
		t.Errorf("DialContext took %v, want one round trip, %v", took, 2*lat)
	}
	if d := done.Sub(started); d < 2*lat {
		t.Errorf("traced connect %v, want at least %v", d, 2*lat)
	}

	// A client that does not wait: its echo returns after handshake (2 lat)
	// plus the echo's own round trip (2 lat).
	got, rt := roundTrip(t, p.Addr(), []byte("ping"))
	if string(got) != "ping" || rt < 4*lat {
		t.Errorf("echo %q after %v, want ping after at least %v", got, rt, 4*lat)
	}
}

// TestProxyBandwidthMeasured: a 4 Mbit/s downstream cap, as a profile
// configures it (a ten-segment bucket), measured on a 160 kB download
// from first to last byte, is within 10 % of the cap.
func TestProxyBandwidthMeasured(t *testing.T) {
	t.Parallel()
	const n, rate = 160_000, 4e6 / 8
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(make([]byte, n))
	}()
	cfg := Profile{Name: "test", Latency: 5 * time.Millisecond, Down: rate}.Config(1)
	p := startProxy(t, ln.Addr().String(), cfg)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rest, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The bucket's burst left with the first byte; the rest is paced.
	paced := float64(len(rest) + 1 - cfg.Down.Burst)
	got := paced / took.Seconds()
	if math.Abs(got/rate-1) > 0.10 {
		t.Errorf("measured %.0f B/s over %v, want %.0f B/s within 10 %%", got, took, rate)
	}
	t.Logf("4mbit cap: measured %.3f Mbit/s", got*8/1e6)
}

// TestProfiles: every named profile is a valid configuration with the
// handshake modelled, unknown names are errors naming the known ones, and
// rates print in units ParseRate reads back.
func TestProfiles(t *testing.T) {
	t.Parallel()
	for _, pr := range Profiles {
		c := pr.Config(1)
		if err := c.Validate(); err != nil || !c.Handshake || c.RTT() != 2*pr.Latency {
			t.Errorf("%s: %+v: %v", pr.Name, c, err)
		}
		for _, bw := range []float64{pr.Down, pr.Up} {
			back, err := ParseRate(FormatRate(bw))
			if err != nil || math.Abs(back-bw) > 1e-6*bw {
				t.Errorf("%s: FormatRate(%v) = %q reads back as %v (%v)", pr.Name, bw, FormatRate(bw), back, err)
			}
		}
	}
	if _, err := LookupProfile("moon"); err == nil || !strings.Contains(err.Error(), "cross-region") {
		t.Errorf("unknown profile: %v", err)
	}
}
