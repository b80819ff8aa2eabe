package mockllm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// BenchmarkStreams holds 2,000 concurrent streams at ITL 20 ms (100,000
// tokens/s) against a real TCP listener, and reports the emission lateness
// (write start minus scheduled due time) and the token rate measured
// while every stream is open. Arrivals are spread uniformly over the first
// second, as independent clients arrive; the client is a raw socket reader
// so it costs as little CPU as possible. Run it with `make bench`;
// MOCK_BENCH_COARSE=1 runs it without the precise waker, for comparison.
func BenchmarkStreams(b *testing.B) {
	for _, proto := range []string{"http1", "h2c", "http1-unix"} {
		for _, streams := range []int{50, 500, 1000, 2000} {
			b.Run(fmt.Sprintf("%s/streams=%d/itl=20ms", proto, streams), func(b *testing.B) {
				for b.Loop() {
					benchStreams(b, proto, streams, 20*time.Millisecond, 250)
				}
			})
		}
	}
}

// benchStreams runs one scenario. Over HTTP/1.1 every token is one write
// system call on its own connection; over h2c (HTTP/2 without TLS, as
// vLLM-fronting proxies and Go clients speak it) the streams share a few
// connections and the server coalesces their frames, so the per-token cost
// is no longer the kernel's. http1-unix is HTTP/1.1 over a Unix socket:
// the same server code, with the kernel's TCP loopback path (about three
// times the cost of a Unix socket per write on the project's VM, see
// BenchmarkSocketFloor) taken out.
func benchStreams(b *testing.B, proto string, streams int, itl time.Duration, tokensPer int) {
	const ramp = time.Second
	ttft := itl
	p, err := engine.Preset("ideal")
	if err != nil {
		b.Fatal(err)
	}
	p.TTFT, p.ITL = ttft, itl
	precise := os.Getenv("MOCK_BENCH_COARSE") == ""
	s, err := New(WithProfile(p), WithSeed(1), WithTruthCapacity(streams), WithPreciseTimers(precise))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ts := httptest.NewUnstartedServer(s)
	ts.Config.MaxHeaderBytes = 1 << 14
	if proto == "h2c" {
		ts.Config.Protocols = new(http.Protocols)
		ts.Config.Protocols.SetHTTP1(true)
		ts.Config.Protocols.SetUnencryptedHTTP2(true)
		ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	}
	network := "tcp"
	if proto == "http1-unix" {
		network = "unix"
		ln, err := net.Listen("unix", b.TempDir()+"/mock.sock")
		if err != nil {
			b.Fatal(err)
		}
		ts.Listener.Close()
		ts.Listener = ln
	}
	ts.Start()
	defer ts.Close()
	addr := ts.Listener.Addr().String()

	body := fmt.Sprintf(
		`{"messages":[{"role":"user","content":"bench"}],"max_tokens":%d,"ignore_eos":true,"stream":true}`,
		tokensPer,
	)
	req := []byte(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(body), body))
	stream := func() error { return rawStream(network, addr, req) }
	if proto == "h2c" {
		stream = h2cStreamer(ts.URL, body)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	offsets := make([]time.Duration, streams)
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(ramp)))
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(offsets[i])))
			if err := stream(); err != nil {
				failed.Add(1)
			}
		}()
	}
	// Steady state: every stream has started and none has finished.
	steadyFrom := start.Add(ramp + ttft + itl)
	steadyTo := start.Add(ttft + time.Duration(tokensPer-1)*itl - 2*itl)
	if !steadyTo.After(steadyFrom) {
		b.Fatalf("no steady window: streams too short for the ramp")
	}
	time.Sleep(time.Until(steadyFrom))
	lat0, tok0 := benchSnapshot(b, s)
	t0, cpu0 := time.Now(), processCPU()
	time.Sleep(time.Until(steadyTo))
	lat1, tok1 := benchSnapshot(b, s)
	window, cpu := time.Since(t0), processCPU()-cpu0
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d streams failed", n, streams)
	}
	late := diffBuckets(lat1, lat0)
	b.ReportMetric(float64(streams), "streams")
	b.ReportMetric((tok1-tok0)/window.Seconds(), "tokens/s")
	b.ReportMetric(late.quantile(0.50)*1e3, "lateness-p50-ms")
	b.ReportMetric(late.quantile(0.99)*1e3, "lateness-p99-ms")
	b.ReportMetric(late.quantile(0.999)*1e3, "lateness-p99.9-ms")
	b.ReportMetric(100*late.fractionAbove(0.001), "%late>1ms")
	b.ReportMetric(100*cpu.Seconds()/window.Seconds(), "cpu-%")
}

// processCPU is this process's user and system CPU time so far: server
// and benchmark client together, since they share the machine's cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSocketFloor is the kernel's share of a token without HTTP or
// the mock: one 180-byte write on one of n connected sockets and its read
// by a goroutine on the other end, round robin over the connections. Its
// cpu-µs/msg (both ends, user and system) is a floor under the mock's
// per-token cost on HTTP/1.1, where each token is one such write:
//
//	go test ./mockllm -run '^$' -bench SocketFloor -benchtime 200000x
func BenchmarkSocketFloor(b *testing.B) {
	for _, network := range []string{"tcp", "unix"} {
		for _, conns := range []int{1, 2000} {
			b.Run(fmt.Sprintf("%s/conns=%d", network, conns), func(b *testing.B) {
				addr := "127.0.0.1:0"
				if network == "unix" {
					addr = b.TempDir() + "/floor.sock"
				}
				ln, err := net.Listen(network, addr)
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				writers := make([]net.Conn, conns)
				var wg sync.WaitGroup
				for i := range writers {
					c, err := net.Dial(network, ln.Addr().String())
					if err != nil {
						b.Fatal(err)
					}
					s, err := ln.Accept()
					if err != nil {
						b.Fatal(err)
					}
					writers[i] = s
					wg.Go(func() {
						defer c.Close()
						buf := make([]byte, 16<<10)
						for {
							if _, err := c.Read(buf); err != nil {
								return
							}
						}
					})
				}
				msg := make([]byte, 180)
				cpu0 := processCPU()
				i := 0
				for b.Loop() {
					if _, err := writers[i%conns].Write(msg); err != nil {
						b.Fatal(err)
					}
					i++
				}
				// Let the readers drain before counting their CPU.
				time.Sleep(100 * time.Millisecond)
				b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
				for _, w := range writers {
					w.Close()
				}
				wg.Wait()
			})
		}
	}
}

// h2cStreamer returns a function that streams one request over a shared
// HTTP/2 cleartext client and reads the body to its end.
func h2cStreamer(base, body string) func() error {
	tr := &http.Transport{Protocols: new(http.Protocols), HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: false}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr}
	return func() error {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		buf := make([]byte, 16<<10)
		var seen bool
		for {
			n, err := resp.Body.Read(buf)
			if bytes.Contains(buf[:n], []byte("[DONE]")) {
				seen = true
			}
			if err == io.EOF {
				if !seen {
					return fmt.Errorf("stream ended before [DONE]")
				}
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
}

// rawStream sends one request on a fresh connection and reads until the
// stream's [DONE], without parsing: the cheapest possible client.
func rawStream(network, addr string, req []byte) error {
	c, err := net.Dial(network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		return err
	}
	buf := make([]byte, 16<<10)
	done := []byte("data: [DONE]")
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if bytes.Contains(chunk, done) ||
				bytes.Contains(append(tail, chunk[:min(len(chunk), len(done))]...), done) {
				return nil
			}
			tail = append(tail[:0], chunk[max(0, n-len(done)):]...)
		}
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("stream ended before [DONE]")
			}
			return err
		}
	}
}

// buckets is a cumulative histogram snapshot.
type buckets struct {
	upper []float64
	cum   []float64
	count float64
}

func benchSnapshot(b *testing.B, s *Server) (buckets, float64) {
	mfs, err := s.Gatherer().Gather()
	if err != nil {
		b.Fatal(err)
	}
	var hb buckets
	var toks float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "testbed_mock_emission_lateness_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			hb = fromHistogram(h)
		case "vllm:generation_tokens_total":
			toks = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return hb, toks
}

func fromHistogram(h *dto.Histogram) buckets {
	var hb buckets
	for _, bk := range h.GetBucket() {
		hb.upper = append(hb.upper, bk.GetUpperBound())
		hb.cum = append(hb.cum, float64(bk.GetCumulativeCount()))
	}
	hb.count = float64(h.GetSampleCount())
	return hb
}

func diffBuckets(a, b buckets) buckets {
	d := buckets{upper: a.upper, cum: make([]float64, len(a.cum)), count: a.count - b.count}
	for i := range a.cum {
		d.cum[i] = a.cum[i]
		if i < len(b.cum) {
			d.cum[i] -= b.cum[i]
		}
	}
	return d
}

// quantile interpolates linearly inside the bucket holding q; above the
// last bound it returns that bound (a floor).
func (h buckets) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * h.count
	lowerBound, lowerCum := 0.0, 0.0
	for i, c := range h.cum {
		if c >= rank {
			if c == lowerCum {
				return h.upper[i]
			}
			return lowerBound + (h.upper[i]-lowerBound)*(rank-lowerCum)/(c-lowerCum)
		}
		lowerBound, lowerCum = h.upper[i], c
	}
	return h.upper[len(h.upper)-1]
}

// fractionAbove is the exact share of samples above bound, which must be a
// bucket boundary.
func (h buckets) fractionAbove(bound float64) float64 {
	for i, u := range h.upper {
		if u == bound {
			return (h.count - h.cum[i]) / h.count
		}
	}
	return -1
}

// discardWriter is a flushing http.ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// hotEmitter is an emitter of a chat stream long enough for any benchmark.
func hotEmitter(tb testing.TB, api string) *emitter {
	s, err := New(WithSeed(1))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	j := &job{api: api, model: "m", stream: true, outTokens: 1 << 30, maxTokens: 1 << 30, finish: finishLength,
		textSeed: 9}
	tr := &Truth{ID: "hot"}
	e := newEmitter(s.emitDeps(j, faultPlan{}, tr.ID), &discardWriter{h: http.Header{}}, j, nil, tr, time.Now())
	e.tr.TokenNS = make([]int64, 0, 1<<20)
	return e
}

// TestEmitDoesNotAllocate guards the per-token path: chunk assembly, write,
// truth and metrics, for every API. Not parallel: AllocsPerRun counts the
// whole process.
func TestEmitDoesNotAllocate(t *testing.T) {
	for _, api := range []string{apiChat, apiCompletions, apiTGI} {
		e := hotEmitter(t, api)
		e.emit(1, time.Now()) // the first chunk carries the role chunk
		if allocs := testing.AllocsPerRun(1000, func() { e.emit(1, time.Now()) }); allocs != 0 {
			t.Errorf("%s: emit allocates %.1f times per token", api, allocs)
		}
	}
}

// BenchmarkEmit is the CPU cost of one token chunk without the network.
func BenchmarkEmit(b *testing.B) {
	e := hotEmitter(b, apiChat)
	b.ReportAllocs()
	for b.Loop() {
		e.emit(1, time.Now())
		if len(e.tr.TokenNS) == cap(e.tr.TokenNS) {
			e.tr.TokenNS = e.tr.TokenNS[:0]
		}
	}
}
