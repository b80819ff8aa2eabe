package serverside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Source is something a Sampler reads on each tick: the local GPUs through
// NVML, or a Prometheus endpoint.
type Source interface {
	// Name identifies the source in samples ("nvml", a URL).
	Name() string
	// Read takes one reading into s (its Devices or Metrics). It must
	// return by ctx's deadline. Calls for one source never overlap.
	Read(ctx context.Context, s *results.Sample) error
}

// Defaults of a Sampler.
const (
	DefaultInterval = time.Second
	DefaultBuffer   = 4096 // readings held between two writes
)

// SamplerOption configures a Sampler.
type SamplerOption func(*Sampler)

// WithInterval sets the sampling period (default 1 s).
func WithInterval(d time.Duration) SamplerOption { return func(s *Sampler) { s.interval = d } }

// WithTimeout bounds one reading (default: the interval, at least 1 s). A
// reading that runs past the next tick delays that source's next reading;
// readings of one source never overlap.
func WithTimeout(d time.Duration) SamplerOption { return func(s *Sampler) { s.timeout = d } }

// WithOutput writes the samples as JSON lines to w, which the caller keeps
// and closes.
func WithOutput(w io.Writer) SamplerOption { return func(s *Sampler) { s.out = w } }

// WithFile writes the samples as JSON lines to a file created by NewSampler
// and closed by Stop.
func WithFile(path string) SamplerOption { return func(s *Sampler) { s.path = path } }

// WithBuffer sets how many readings may wait for the writer (default 4096);
// past that, readings are dropped and counted.
func WithBuffer(n int) SamplerOption { return func(s *Sampler) { s.capacity = n } }

// WithFlushEvery sets how often buffered readings are written (default:
// five intervals, at most 5 s).
func WithFlushEvery(d time.Duration) SamplerOption { return func(s *Sampler) { s.flushEvery = d } }

// ErrDropped is wrapped by Stop's error when readings were dropped because
// the buffer was full, so a caller can warn rather than fail.
var ErrDropped = results.ErrDropped

// Stats counts a Sampler's readings.
type Stats struct {
	Samples int64 `json:"samples"` // readings taken, failed ones included
	Errors  int64 `json:"errors"`  // readings that failed (kept, with their error)
	Dropped int64 `json:"dropped"` // readings lost because the buffer was full
	Written int64 `json:"written"` // lines written
	// WriteErrors counts lines lost because the output failed.
	WriteErrors int64 `json:"write_errors"`
}

// Sampler reads its sources periodically, on results.Periodic, and writes
// each reading as a JSON line. Create it with NewSampler and call Stop when
// the run is over.
type Sampler struct {
	start      time.Time
	interval   time.Duration
	timeout    time.Duration
	capacity   int
	flushEvery time.Duration
	out        io.Writer
	path       string
	lines      *results.Periodic[results.Sample]

	mu      sync.Mutex
	pending map[string]int64 // drops per source not yet reported in a line
	samples int64
	errors  int64

	stopOnce sync.Once
	stopErr  error
}

// NewSampler starts reading sources at once and then once per interval.
// Offsets in the samples are measured from start, which should be the
// harness's run start (its records use the same origin); start must carry a
// monotonic reading (come from time.Now).
func NewSampler(start time.Time, sources []Source, opts ...SamplerOption) (*Sampler, error) {
	s := &Sampler{
		start:    start,
		interval: DefaultInterval,
		capacity: DefaultBuffer,
		pending:  map[string]int64{},
	}
	for _, o := range opts {
		o(s)
	}
	switch {
	case len(sources) == 0:
		return nil, errors.New("sampler: no sources")
	case s.interval <= 0:
		return nil, fmt.Errorf("sampler: interval %v must be positive", s.interval)
	case s.capacity <= 0:
		return nil, fmt.Errorf("sampler: buffer %d must be positive", s.capacity)
	case start.IsZero():
		return nil, errors.New("sampler: zero start time")
	}
	if s.timeout <= 0 {
		s.timeout = max(s.interval, time.Second)
	}
	lines, err := results.NewPeriodic[results.Sample](results.PeriodicConfig{
		Interval:   s.interval,
		FlushEvery: s.flushEvery,
		Capacity:   s.capacity,
		Path:       s.path,
		Out:        s.out,
	})
	if err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	s.lines = lines
	for _, src := range sources {
		s.lines.Every(func() { s.take(src) })
	}
	return s, nil
}

// take reads src once and buffers the sample.
func (s *Sampler) take(src Source) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	begin := time.Now()
	smp := results.Sample{Offset: int64(begin.Sub(s.start)), Time: begin.UTC(), Source: src.Name()}
	err := src.Read(ctx, &smp)
	smp.Took = int64(time.Since(begin))
	if err != nil {
		smp.Error = err.Error()
		smp.Devices = nil
		smp.Metrics = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if err != nil {
		s.errors++
	}
	smp.DroppedBefore = s.pending[smp.Source]
	if !s.lines.Add(smp) {
		s.pending[smp.Source]++
		return
	}
	delete(s.pending, smp.Source)
}

// Stats returns the counts so far.
func (s *Sampler) Stats() Stats {
	ls := s.lines.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Samples: s.samples, Errors: s.errors, Dropped: ls.Dropped, Written: ls.Written, WriteErrors: ls.Lost}
}

// Stop ends sampling, takes one last reading of every source (so the
// timeline covers the end of the run), writes everything buffered and
// closes the file. It is safe to call twice; later calls return the first
// call's result. A non-nil error means lines were lost to the output, or
// wraps ErrDropped when readings were dropped.
func (s *Sampler) Stop() error {
	s.stopOnce.Do(func() {
		if err := s.lines.Stop(); err != nil {
			s.stopErr = fmt.Errorf("sampler: %w", err)
		}
	})
	return s.stopErr
}
