package serverside

import (
	"github.com/llm-testbed/testbed/harness/results"

	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSamplerTimelineAgainstTheMock scrapes a real mock while a streamed
// request runs: the timeline must show it running, then done with all its
// tokens counted, in order on the caller's clock.
func TestSamplerTimelineAgainstTheMock(t *testing.T) {
	t.Parallel()
	const tokens, itl = 30, 10 * time.Millisecond
	ts := newMock(t, 20*time.Millisecond, itl)
	p, err := NewPrometheus(ts.URL+"/metrics", WithSeries("vllm:num_requests_running", "vllm:generation_tokens_total"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, results.ServerMetricsFile)
	// The run "started" an hour ago: offsets are measured from the
	// caller's start, not the sampler's.
	start := time.Now().Add(-time.Hour)
	s, err := NewSampler(start, []Source{p}, WithInterval(itl/2), WithFile(path))
	if err != nil {
		t.Fatal(err)
	}
	chat(t, ts.URL, tokens, true) // ≈ 20 ms + 29 × 10 ms
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := results.ReadSamples(path)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if int64(len(got)) != st.Written || st.Samples != st.Written || st.Dropped != 0 || st.Errors != 0 {
		t.Fatalf("%d lines, stats %+v", len(got), st)
	}
	running, gen := `vllm:num_requests_running{model_name="m"}`, `vllm:generation_tokens_total{model_name="m"}`
	sawRunning := false
	for i, smp := range got {
		if smp.Offset < int64(time.Hour) || (i > 0 && smp.Offset < got[i-1].Offset) {
			t.Fatalf("sample %d offset %v: not on the caller's clock or out of order", i, time.Duration(smp.Offset))
		}
		if smp.Metrics[running] == 1 {
			sawRunning = true
		}
	}
	if !sawRunning {
		t.Errorf("no sample of %d saw the request running (interval %v, request ≈ %v)", len(got), itl/2, tokens*itl)
	}
	last := got[len(got)-1] // Stop's final reading, after the request ended
	if last.Metrics[running] != 0 || last.Metrics[gen] != tokens {
		t.Errorf("final sample %v, want 0 running and %d tokens generated", last.Metrics, tokens)
	}
}

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.buf.Write(p)
}

// countingSource answers instantly with its call number.
type countingSource struct{ n atomic.Int64 }

func (c *countingSource) Name() string { return "count" }
func (c *countingSource) Read(_ context.Context, s *results.Sample) error {
	s.Metrics = map[string]float64{"n": float64(c.n.Add(1))}
	return nil
}

// TestSamplerCountsDrops stalls the writer: sampling goes on, the full
// buffer drops readings, and every drop is counted and reported.
func TestSamplerCountsDrops(t *testing.T) {
	t.Parallel()
	w := &blockingWriter{release: make(chan struct{})}
	src := &countingSource{}
	s, err := NewSampler(time.Now(), []Source{src}, WithInterval(time.Millisecond), WithBuffer(3),
		WithFlushEvery(time.Millisecond), WithOutput(w))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Dropped < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("no drops with a stalled writer: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(w.release)
	// Let a line after the drops be written, so it carries dropped_before.
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Written < 8 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	err = s.Stop()
	if !errors.Is(err, ErrDropped) {
		t.Fatalf("Stop = %v, want ErrDropped", err)
	}
	if err2 := s.Stop(); err2 != err {
		t.Errorf("second Stop = %v, want the first's %v", err2, err)
	}
	st := s.Stats()
	got, derr := results.DecodeSamples(&w.buf)
	if derr != nil {
		t.Fatal(derr)
	}
	var reported int64
	for _, smp := range got {
		reported += smp.DroppedBefore
	}
	if st.Samples != st.Written+st.Dropped || int64(len(got)) != st.Written {
		t.Errorf("stats %+v with %d lines: every reading must be written or counted as dropped", st, len(got))
	}
	if reported < 1 || reported > st.Dropped {
		t.Errorf("lines report %d drops, stats %d", reported, st.Dropped)
	}
	// Readings keep their order: the counter only grows along the file.
	for i := 1; i < len(got); i++ {
		if got[i].Metrics["n"] <= got[i-1].Metrics["n"] {
			t.Fatalf("line %d out of order: %v after %v", i, got[i].Metrics["n"], got[i-1].Metrics["n"])
		}
	}
}

// failingSource always fails.
type failingSource struct{}

func (failingSource) Name() string { return "broken" }
func (failingSource) Read(context.Context, *results.Sample) error {
	return errors.New("no route to exporter")
}

func TestSamplerKeepsFailedReadings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s, err := NewSampler(
		time.Now(),
		[]Source{failingSource{}, &countingSource{}},
		WithInterval(time.Hour),
		WithOutput(&buf),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := results.DecodeSamples(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// One reading at start and one at Stop, per source.
	bySource := map[string]int{}
	for _, smp := range got {
		bySource[smp.Source]++
		if smp.Source == "broken" && smp.Error != "no route to exporter" {
			t.Errorf("failed reading lost its error: %+v", smp)
		}
	}
	if bySource["broken"] != 2 || bySource["count"] != 2 || s.Stats().Errors != 2 {
		t.Errorf("lines per source %v, stats %+v; want 2 each and 2 errors", bySource, s.Stats())
	}
}

func TestNewSamplerValidates(t *testing.T) {
	t.Parallel()
	src := []Source{&countingSource{}}
	cases := []struct {
		name    string
		start   time.Time
		sources []Source
		opts    []SamplerOption
		want    string
	}{
		{
			"no sources",
			time.Now(),
			nil,
			nil,
			"no sources",
		}, // nothing to read
		{
			"zero interval",
			time.Now(),
			src,
			[]SamplerOption{WithInterval(0)},
			"interval",
		}, // ticker needs a period
		{
			"zero buffer",
			time.Now(),
			src,
			[]SamplerOption{WithBuffer(0)},
			"buffer",
		}, // nothing could be kept
		{
			"zero start",
			time.Time{},
			src,
			nil,
			"start",
		}, // offsets need an origin
		{
			"unwritable file",
			time.Now(),
			src,
			[]SamplerOption{WithFile("/nonexistent/dir/x.jsonl")},
			"sampler",
		}, // error surfaces
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := NewSampler(c.start, c.sources, c.opts...)
			if err == nil {
				s.Stop()
				t.Fatal("NewSampler accepted it")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// errWriter fails every write.
type errWriter struct{}

func (*errWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestSamplerReportsWriteErrors(t *testing.T) {
	t.Parallel()
	s, err := NewSampler(time.Now(), []Source{&countingSource{}}, WithInterval(time.Hour), WithOutput(&errWriter{}))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Stop()
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Stop = %v, want the write error", err)
	}
	if st := s.Stats(); st.WriteErrors != 2 || st.Written != 0 {
		t.Errorf("stats %+v, want 2 lines lost to the writer", st)
	}
}
