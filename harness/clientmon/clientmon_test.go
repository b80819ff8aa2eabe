package clientmon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// burn keeps one goroutine busy on the CPU for d of wall time.
func burn(d time.Duration) {
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			x = x*1.0000001 + 1e-9
		}
	}
	runtime.KeepAlive(x)
}

func TestStepVerdicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		opts      []Option
		work      func()
		lag       time.Duration
		wantBound bool
		wantWhy   string // substring of the reason when bound
	}{
		// A CPU-burning goroutine during the step, against a tiny CPU
		// threshold of one core: the step is client-bound on purpose, even
		// when other processes leave this one only a sliver of the machine.
		{
			"cpu burn",
			[]Option{WithCores(1), WithCPUThreshold(0.02), WithMaxSchedLatency(0)},
			func() { burn(400 * time.Millisecond) },
			LagUnknown,
			true,
			"client CPU",
		},
		// An idle step under the default threshold: the client did nothing,
		// so nothing may flag it. The scheduler rule is off because parallel
		// tests share this process.
		{
			"idle",
			[]Option{WithMaxSchedLatency(0)},
			func() { time.Sleep(300 * time.Millisecond) },
			LagUnknown,
			false,
			"",
		},
		// The harness reports a schedule lag p99 of 3 ms, above the 1 ms bound.
		{
			"schedule lag",
			[]Option{WithMaxSchedLatency(0)},
			func() { time.Sleep(50 * time.Millisecond) },
			3 * time.Millisecond,
			true,
			"schedule lag p99 3.00 ms",
		},
		// A lag just under the bound is fine.
		{
			"lag under bound",
			[]Option{WithMaxSchedLatency(0)},
			func() { time.Sleep(50 * time.Millisecond) },
			900 * time.Microsecond,
			false,
			"",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var warn bytes.Buffer
			var mu sync.Mutex
			m, err := New(
				append(
					[]Option{WithInterval(100 * time.Millisecond), WithWarnings(lockedWriter{&mu, &warn})},
					tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Stop()
			m.Begin("s1")
			tc.work()
			v := m.End("s1", tc.lag)
			if v.ClientBound != tc.wantBound {
				t.Fatalf("client_bound = %v, want %v (verdict %+v)", v.ClientBound, tc.wantBound, v)
			}
			if !strings.Contains(v.Reason(), tc.wantWhy) {
				t.Errorf("reason %q does not contain %q", v.Reason(), tc.wantWhy)
			}
			mu.Lock()
			printed := warn.String()
			mu.Unlock()
			if tc.wantBound != strings.Contains(printed, "client-bound") {
				t.Errorf("terminal warning %q, want one only when bound", printed)
			}
			if v.Samples < 1 || v.Duration <= 0 {
				t.Errorf("verdict has no observations: %+v", v)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// The samples file holds samples and the step verdict; Stop is safe twice.
func TestFileAndStopTwice(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), results.ClientFile)
	m, err := New(WithFile(path), WithInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	m.Begin("c=1")
	time.Sleep(120 * time.Millisecond)
	m.End("c=1", 200*time.Microsecond)
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string]int{}
	inStep := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Kind    string  `json:"kind"`
			Step    string  `json:"step"`
			RSS     uint64  `json:"rss_bytes"`
			Threads int32   `json:"threads"`
			Lag     float64 `json:"schedule_lag_p99_ms"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		kinds[rec.Kind]++
		if rec.Kind == "sample" {
			if rec.RSS == 0 || rec.Threads == 0 {
				t.Errorf("sample without RSS or threads: %s", sc.Text())
			}
			if rec.Step == "c=1" {
				inStep++
			}
		}
		if rec.Kind == "step" && rec.Lag != 0.2 {
			t.Errorf("step lag %v ms, want 0.2", rec.Lag)
		}
	}
	// 120 ms at 20 ms per sample: several ticks, plus Begin's, End's and Stop's.
	if kinds["sample"] < 4 || kinds["step"] != 1 || inStep < 2 {
		t.Errorf("records by kind %v, %d samples inside the step", kinds, inStep)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A failing writer is reported by Stop with the number of records lost.
func TestWriteErrorCounted(t *testing.T) {
	t.Parallel()
	m, err := New(WithOutput(failWriter{}), WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m.Sample()
	m.Sample()
	err = m.Stop()
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "lines lost") {
		t.Fatalf("Stop() = %v, want the write error and a lost count", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opt  Option
	}{
		{"zero interval", WithInterval(0)},           // a ticker needs a period
		{"CPU share above 1", WithCPUThreshold(1.5)}, // more than all cores can never be reached
		{"CPU share zero", WithCPUThreshold(0)},      // every step would be bound
		{"negative lag", WithMaxScheduleLag(-time.Millisecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if m, err := New(tc.opt); err == nil {
				m.Stop()
				t.Fatal("New accepted a bad option")
			}
		})
	}
}

func TestHistDelta(t *testing.T) {
	t.Parallel()
	buckets := []float64{0, 1, 2, 4, 8}
	cases := []struct {
		name     string
		prev     []uint64
		cur      []uint64
		q        float64
		wantQ    float64
		wantMax  float64
		wantTotl uint64
	}{
		// No earlier snapshot: everything counts; 99 of 100 in [0,1), one in [4,8).
		{"first", nil, []uint64{99, 0, 0, 1}, 0.99, 0, 4, 100},
		// The interval saw only what grew since prev: two values in [2,4).
		{"interval", []uint64{99, 0, 0, 1}, []uint64{99, 0, 2, 1}, 0.5, 2, 2, 2},
		// An empty interval reports zero, never a stale value.
		{"empty", []uint64{5, 5, 5, 5}, []uint64{5, 5, 5, 5}, 0.99, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var prev *metrics.Float64Histogram
			if tc.prev != nil {
				prev = &metrics.Float64Histogram{Counts: tc.prev, Buckets: buckets}
			}
			d := delta(prev, &metrics.Float64Histogram{Counts: tc.cur, Buckets: buckets})
			if got := d.quantile(tc.q); got != tc.wantQ {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.wantQ)
			}
			if got := d.max(); got != tc.wantMax {
				t.Errorf("max = %v, want %v", got, tc.wantMax)
			}
			if got := d.total(); got != tc.wantTotl {
				t.Errorf("total = %v, want %v", got, tc.wantTotl)
			}
		})
	}
}

func TestAvailableCores(t *testing.T) {
	t.Parallel()
	c := AvailableCores()
	if c <= 0 || c > float64(runtime.NumCPU()) || c > float64(runtime.GOMAXPROCS(0)) {
		t.Fatalf("AvailableCores() = %v with %d CPUs, GOMAXPROCS %d", c, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
}

// What a Monitor writes, results.ReadClient reads back unchanged (encode/decode round
// trip), with the harness's step index on each verdict.
func TestReadFileRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), results.ClientFile)
	m, err := New(WithFile(path), WithInterval(10*time.Millisecond), WithMaxSchedLatency(0))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []int{1, 8} {
		name := fmt.Sprintf("%d mock c=%d", i, c)
		m.Begin(name)
		time.Sleep(30 * time.Millisecond)
		m.EndStep(name, i, time.Duration(i)*2*time.Millisecond)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	samples, verdicts, err := results.ReadClient(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(verdicts, m.Verdicts()) {
		t.Errorf("read verdicts differ:\n got %+v\nwant %+v", verdicts, m.Verdicts())
	}
	if len(verdicts) != 2 || verdicts[1].StepIndex != 1 || !verdicts[1].ClientBound || verdicts[0].ClientBound {
		t.Errorf("verdicts %+v: want step 1 bound by its 2 ms lag, step 0 not", verdicts)
	}
	if len(samples) < 4 {
		t.Errorf("%d samples", len(samples))
	}
	// A foreign line is an error naming it.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"kind":"sample"}`+"\n"+`{"kind":"gpu"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := results.ReadClient(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("results.ReadClient(bad) = %v, want an error at line 2", err)
	}
}
