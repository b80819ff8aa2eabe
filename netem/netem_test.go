package netem

import (
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		want    float64 // bytes per second
		wantErr bool
	}{
		{"10mbit", 1.25e6, false},  // tc: SI megabits
		{"500kbit", 62500, false},  // kilobits
		{"1gbit", 1.25e8, false},   // gigabits
		{"8bit", 1, false},         // bits
		{"2mbps", 2e6, false},      // tc: "bps" is bytes per second
		{"125000", 125000, false},  // bare number: bytes/s, as tc
		{"1.5Mbit", 187500, false}, // case-insensitive, fractions
		{" 10 mbit ", 1.25e6, false},
		{"0", 0, false},     // unlimited
		{"", 0, false},      // unlimited
		{"fast", 0, true},   // no number
		{"-1mbit", 0, true}, // negative
		{"10 furlongs", 0, true},
		{"Infmbit", 0, true},
	}
	for _, c := range cases {
		got, err := ParseRate(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10mbit", "2mbps", "125000", "1e3kbit", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err == nil && (v < 0 || v != v) {
			t.Fatalf("ParseRate(%q) = %v", s, v)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"zero", Config{}, ""}, // passthrough is valid
		{
			"full",
			Config{
				Up: Direction{
					Latency:    ms(5),
					Jitter:     ms(1),
					Bandwidth:  1e6,
					Burst:      1000,
					StallEvery: time.Second,
					StallFor:   ms(100),
					StallProb:  0.01,
					ResetAfter: 1e6,
					ResetProb:  0.001,
				},
			},
			"",
		},
		{
			"negative latency",
			Config{Down: Direction{Latency: -1}},
			"down.latency",
		}, // names the direction and field
		{
			"stall without duration",
			Config{Up: Direction{StallEvery: time.Second}},
			"up.stall_for must be positive",
		}, // a stall needs a length
		{
			"stall longer than period",
			Config{Up: Direction{StallEvery: ms(10), StallFor: ms(10)}},
			"shorter than stall_every",
		},
		{"probability above 1", Config{Down: Direction{ResetProb: 1.5}}, "down.reset_prob"},
		{"NaN bandwidth", Config{Up: Direction{Bandwidth: nan()}}, "up.bandwidth"},
		{"negative chunk", Config{ChunkSize: -1}, "chunk_size"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if _, err := New("no-port", Config{}); err == nil {
		t.Error("New accepted an upstream without a port")
	}
}

func nan() float64 { var z float64; return z / z }

// BenchmarkProxyThroughput streams bytes one way through an unshaped proxy,
// with 1 ms latency each way (which must not cut throughput: delivery is
// pipelined, not stop-and-wait), and through a 100 Mbit/s limit (the
// delivered rate must match it).
func BenchmarkProxyThroughput(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"passthrough", Config{}},
		{"latency_1ms", Symmetric(Direction{Latency: time.Millisecond})},
		{"bandwidth_100mbit", Symmetric(Direction{Bandwidth: 12.5e6})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sink, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer sink.Close()
			got := make(chan int64, 1)
			go func() {
				c, err := sink.Accept()
				if err != nil {
					got <- 0
					return
				}
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				got <- n
			}()
			p := startProxy(b, sink.Addr().String(), bc.cfg)
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.(*net.TCPConn).CloseWrite()
			n := <-got
			el := time.Since(start)
			b.StopTimer()
			c.Close()
			if n != int64(b.N)*int64(len(buf)) {
				b.Fatalf("sink got %d bytes of %d", n, int64(b.N)*int64(len(buf)))
			}
			b.ReportMetric(float64(n)/el.Seconds()/1e6, "MB/s_delivered")
			if bw := bc.cfg.Up.Bandwidth; bw > 0 {
				b.ReportMetric(float64(n)/el.Seconds()/bw, "of_configured_rate")
			}
		})
	}
}

// BenchmarkProxyLatency ping-pongs 64-byte messages through a proxy adding
// 2 ms each way in front of an echo server and reports how far the round
// trip exceeds the configured 4 ms (timer wake-up, scheduling, loopback).
func BenchmarkProxyLatency(b *testing.B) {
	const lat = 2 * time.Millisecond
	p := startProxy(b, echoServer(b), Symmetric(Direction{Latency: lat}))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg, back := make([]byte, 64), make([]byte, 64)
	excess := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, back); err != nil {
			b.Fatal(err)
		}
		excess = append(excess, time.Since(start)-2*lat)
	}
	b.StopTimer()
	slices.Sort(excess)
	q := func(f float64) float64 { return float64(excess[int(f*float64(len(excess)-1))].Microseconds()) }
	if excess[0] < 0 {
		b.Fatalf("a round trip took %v less than the configured %v", -excess[0], 2*lat)
	}
	b.ReportMetric(q(0.5), "excess_p50_us")
	b.ReportMetric(q(0.99), "excess_p99_us")
	st := p.Stats()
	b.ReportMetric(float64(st.Late1ms)/float64(max(st.Chunks, 1))*100, "late_over_1ms_%")
}
