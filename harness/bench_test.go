package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// mockEnv makes the test binary serve the mock instead of running tests,
// so benchmarks can put the server in another process and measure the
// client's CPU alone. Its value is "TTFT,ITL", e.g. "100ms,10ms".
const mockEnv = "TESTBED_BENCH_MOCK"

func TestMain(m *testing.M) {
	if spec := os.Getenv(mockEnv); spec != "" {
		if err := serveMockProcess(spec); err != nil {
			fmt.Fprintln(os.Stderr, "mock process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveMockProcess serves the mock on a loopback port, prints the address,
// and exits when stdin closes (the parent went away).
func serveMockProcess(spec string) error {
	a, b, _ := strings.Cut(spec, ",")
	ttft, err := time.ParseDuration(a)
	if err != nil {
		return err
	}
	itl, err := time.ParseDuration(b)
	if err != nil {
		return err
	}
	p, err := engine.Preset("ideal")
	if err != nil {
		return err
	}
	p.TTFT, p.ITL = ttft, itl
	// Truth for a few thousand requests, for tests that compare with it;
	// benchmarks never read it.
	m, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel("m"), mockllm.WithTruthCapacity(4096))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	go func() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n'); os.Exit(0) }()
	return (&http.Server{Handler: m}).Serve(ln)
}

// mockProcess starts the mock in a child process and returns its URL.
func mockProcess(b testing.TB, ttft, itl time.Duration) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), mockEnv+"="+ttft.String()+","+itl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		b.Fatalf("mock process said %q: %v", line, err)
	}
	return "http://" + strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOpenLoop500 sends Poisson arrivals at 500 req/s for 10 s to the
// mock (in another process) and reports the achieved rate and the
// client's schedule lag. Run it alone:
//
//	flock /tmp/testbed-bench.lock go test ./harness -run '^$' -bench OpenLoop500 -benchtime 1x
func BenchmarkOpenLoop500(b *testing.B) {
	const rate = 500.0
	url := mockProcess(b, 50*time.Millisecond, 10*time.Millisecond)
	for b.Loop() {
		p := basePlan(url)
		p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:16")
		p.IgnoreEOS = true
		p.Load = harness.Load{
			Rate:     []float64{rate},
			Arrival:  harness.ArrivalPoisson,
			Duration: harness.Duration(10 * time.Second),
		}
		cpu0, wall0 := cpuTime(), time.Now()
		res, recs := runRecords(b, p)
		b.ReportMetric(100*(cpuTime()-cpu0).Seconds()/time.Since(wall0).Seconds(), "client-cpu-%")
		var firstSent, lastSent, firstInt, lastInt int64
		for i, r := range recs {
			if i == 0 || r.SentNS < firstSent {
				firstSent = r.SentNS
			}
			if i == 0 || r.IntendedNS < firstInt {
				firstInt = r.IntendedNS
			}
			lastSent, lastInt = max(lastSent, r.SentNS), max(lastInt, r.IntendedNS)
		}
		n := float64(len(recs) - 1)
		achieved := n / (float64(lastSent-firstSent) / 1e9)
		scheduled := n / (float64(lastInt-firstInt) / 1e9)
		st := res.Summary.Steps[0]
		b.ReportMetric(achieved, "req/s")
		b.ReportMetric(100*(achieved-rate)/rate, "rate-err-%")
		b.ReportMetric(100*(achieved-scheduled)/scheduled, "vs-schedule-%")
		b.ReportMetric(st.ScheduleLag.P50, "lag-p50-ms")
		b.ReportMetric(st.ScheduleLag.P99, "lag-p99-ms")
		b.ReportMetric(float64(st.Requests-st.OK), "failed")
	}
}

// BenchmarkStreamCPU measures the client's CPU per streamed token with
// 1,000 concurrent streams, the mock in another process so its CPU is not
// counted:
//
//	flock /tmp/testbed-bench.lock go test ./harness -run '^$' -bench StreamCPU -benchtime 1x
func BenchmarkStreamCPU(b *testing.B) {
	const streams = 1000
	url := mockProcess(b, 100*time.Millisecond, 25*time.Millisecond)
	for b.Loop() {
		p := basePlan(url)
		p.IgnoreEOS = true
		p.Load = harness.Load{Concurrency: []int{streams}, Requests: 2 * streams}
		cpu0, wall0 := cpuTime(), time.Now()
		res, err := harness.Run(context.Background(), p, b.TempDir())
		cpu, wall := cpuTime()-cpu0, time.Since(wall0)
		if err != nil {
			b.Fatal(err)
		}
		st := res.Summary.Steps[0]
		tokens := float64(st.OutputTokens)
		if st.OK < st.Requests {
			b.Logf("%d of %d requests failed: %v", st.Requests-st.OK, st.Requests, st.Errors)
		}
		b.ReportMetric(float64(cpu.Microseconds())/tokens, "cpu-µs/token")
		b.ReportMetric(tokens/wall.Seconds(), "tokens/s")
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
		b.ReportMetric(st.ITL.P50, "itl-p50-ms")
		b.ReportMetric(st.TTFT.P50, "ttft-p50-ms")
	}
}
