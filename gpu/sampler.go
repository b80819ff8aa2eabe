package gpu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
var ErrDropped = errors.New("readings dropped")

// Stats counts a Sampler's readings.
type Stats struct {
	Samples int64 `json:"samples"` // readings taken, failed ones included
	Errors  int64 `json:"errors"`  // readings that failed (kept, with their error)
	Dropped int64 `json:"dropped"` // readings lost because the buffer was full
	Written int64 `json:"written"` // lines written
	// WriteErrors counts lines lost because the output failed.
	WriteErrors int64 `json:"write_errors"`
}

// Sampler reads its sources periodically and writes each reading as a JSON
// line. Create it with NewSampler and call Stop when the run is over.
type Sampler struct {
	sources    []Source
	start      time.Time
	interval   time.Duration
	timeout    time.Duration
	capacity   int
	flushEvery time.Duration
	out        io.Writer
	path       string
	file       *os.File
	w          *bufio.Writer

	mu      sync.Mutex
	buf     []results.Sample
	pending map[string]int64 // drops per source not yet reported in a line
	stats   Stats
	werr    error

	wmu      sync.Mutex // serialises writes to w
	stop     chan struct{}
	loops    sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// NewSampler starts reading sources at once and then once per interval.
// Offsets in the samples are measured from start, which should be the
// harness's run start (its records use the same origin); start must carry a
// monotonic reading (come from time.Now).
func NewSampler(start time.Time, sources []Source, opts ...SamplerOption) (*Sampler, error) {
	s := &Sampler{
		sources:  sources,
		start:    start,
		interval: DefaultInterval,
		capacity: DefaultBuffer,
		pending:  map[string]int64{},
		stop:     make(chan struct{}),
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
	if s.flushEvery <= 0 {
		s.flushEvery = min(5*s.interval, 5*time.Second)
	}
	if s.path != "" {
		f, err := os.Create(s.path)
		if err != nil {
			return nil, fmt.Errorf("sampler: %w", err)
		}
		s.file, s.out = f, f
	}
	if s.out != nil {
		s.w = bufio.NewWriterSize(s.out, 64<<10)
	}
	for _, src := range sources {
		s.loops.Add(1)
		go s.sampleLoop(src)
	}
	s.loops.Add(1)
	go s.flushLoop()
	return s, nil
}

// sampleLoop reads src once now and then per tick. It only appends to the
// buffer, so a slow disk never delays a reading.
func (s *Sampler) sampleLoop(src Source) {
	defer s.loops.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.take(src)
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
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
		smp.Devices, smp.Metrics = nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Samples++
	if err != nil {
		s.stats.Errors++
	}
	if len(s.buf) >= s.capacity {
		s.stats.Dropped++
		s.pending[smp.Source]++
		return
	}
	smp.DroppedBefore = s.pending[smp.Source]
	delete(s.pending, smp.Source)
	s.buf = append(s.buf, smp)
}

func (s *Sampler) flushLoop() {
	defer s.loops.Done()
	t := time.NewTicker(s.flushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.flush()
		}
	}
}

// flush writes the buffered samples out. Without an output they are
// counted as written and discarded, so a Sampler used for Stats alone
// never fills up.
func (s *Sampler) flush() {
	s.mu.Lock()
	batch := s.buf
	s.buf = make([]results.Sample, 0, min(len(batch)*2+1, s.capacity))
	s.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var written, lost int64
	var werr error
	if s.w == nil {
		written = int64(len(batch))
	} else {
		enc := json.NewEncoder(s.w)
		for i := range batch {
			if err := enc.Encode(&batch[i]); err != nil {
				werr = err
				lost = int64(len(batch) - i)
				break
			}
			written++
		}
		if werr == nil {
			if err := s.w.Flush(); err != nil {
				werr, lost, written = err, lost+written, 0
			}
		}
	}
	s.mu.Lock()
	s.stats.Written += written
	s.stats.WriteErrors += lost
	if werr != nil && s.werr == nil {
		s.werr = fmt.Errorf("sampler: write: %w", werr)
	}
	s.mu.Unlock()
}

// Stats returns the counts so far.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Stop ends sampling, takes one last reading of every source (so the
// timeline covers the end of the run), writes everything buffered and
// closes the file. It is safe to call twice; later calls return the first
// call's result. A non-nil error means lines were lost to the output.
func (s *Sampler) Stop() error {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.loops.Wait()
		for _, src := range s.sources {
			s.take(src)
		}
		s.flush()
		s.mu.Lock()
		err := s.werr
		if n := s.stats.Dropped; n > 0 {
			err = errors.Join(err, fmt.Errorf("sampler: %d %w (buffer of %d full)", n, ErrDropped, s.capacity))
		}
		s.mu.Unlock()
		if s.file != nil {
			if cerr := s.file.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("sampler: %w", cerr))
			}
		}
		s.stopErr = err
	})
	return s.stopErr
}
