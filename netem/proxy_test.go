package netem

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// startProxy runs a proxy on loopback in front of upstream.
func startProxy(t testing.TB, upstream string, cfg Config) *Proxy {
	t.Helper()
	p, err := New(upstream, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// echoServer echoes every connection back on loopback.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes data through the proxy and reads the echo back.
func roundTrip(t testing.TB, addr string, data []byte) ([]byte, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	go func() {
		_, _ = c.Write(data)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return got, time.Since(start)
}

func TestProxyKeepsBytesInOrder(t *testing.T) {
	t.Parallel()
	data := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	cases := []struct {
		name string
		cfg  Config
	}{
		{"passthrough", Config{}}, // zero config
		{
			"jitter larger than latency",
			Symmetric(Direction{Latency: ms(2), Jitter: ms(5)}),
		}, // order must survive jitter
		{"small chunks", Config{ChunkSize: 7, Seed: 3, Up: Direction{Jitter: ms(1)}}}, // many tiny chunks
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, echoServer(t), c.cfg)
			payload := data
			if c.cfg.ChunkSize == 7 {
				payload = data[:64<<10] // 10k chunks each way is enough
			}
			got, _ := roundTrip(t, p.Addr(), payload)
			if !bytes.Equal(got, payload) {
				t.Fatalf("echo differs: %d bytes back of %d", len(got), len(payload))
			}
			st := p.Stats()
			if st.BytesUp != int64(len(payload)) || st.BytesDown != int64(len(payload)) || st.Accepted != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestProxyBandwidthAndLatencyCompose sends 200 kB through a 1 MB/s
// downstream link with 20 ms latency each way: the echo cannot finish
// before 200 ms of transmission plus both latencies.
func TestProxyBandwidthAndLatencyCompose(t *testing.T) {
	t.Parallel()
	const n, bw, lat = 200_000, 1e6, 20 * time.Millisecond
	cfg := Config{Up: Direction{Latency: lat}, Down: Direction{Latency: lat, Bandwidth: bw}}
	p := startProxy(t, echoServer(t), cfg)
	got, took := roundTrip(t, p.Addr(), make([]byte, n))
	want := time.Duration(n/bw*float64(time.Second)) + 2*lat
	if len(got) != n {
		t.Fatalf("%d bytes back", len(got))
	}
	// The lower bound is exact (delivery times are absolute). Had latency
	// been slept per chunk, it would accumulate to about chunks × latency
	// (≈ 2 s here); the upper bound sits halfway to that.
	chunks := n / cfg.chunkSize(cfg.Down)
	bound := want + time.Duration(chunks/2)*lat
	if took < want || took > bound {
		t.Errorf("took %v, want [%v, %v]", took, want, bound)
	}
	t.Logf("200 kB at 1 MB/s + 2×%v: took %v (ideal %v)", lat, took, want)
}

func TestProxyDialErrorAndClose(t *testing.T) {
	t.Parallel()
	// An upstream nobody listens on: the client's connection is closed and
	// the failure counted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead, Config{DialTimeout: time.Second})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("read on a connection with no upstream: %v, want EOF or reset", err)
	}
	c.Close()
	if st := p.Stats(); st.DialErrors != 1 {
		t.Errorf("dial errors %d, want 1", st.DialErrors)
	}

	// Close with a connection open ends it, and a second Close is harmless.
	p2 := startProxy(t, echoServer(t), Symmetric(Direction{Latency: time.Hour}))
	c2, err := net.Dial("tcp", p2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("held for an hour"))
	for deadline := time.Now().Add(5 * time.Second); p2.Stats().Active != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- p2.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end an open connection")
	}
	if err := p2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if st := p2.Stats(); st.Active != 0 || st.BytesDown != 0 {
		t.Errorf("after Close: %+v", st)
	}
}
