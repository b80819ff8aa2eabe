package results

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// MaxTrackableUS is one hour: longer values are clamped and counted.
const MaxTrackableUS = 3_600_000_000

// Metric accumulates one latency metric of a step: exact count, mean,
// variance (Welford, in ns), min and max, plus an HDR histogram recorded in
// microseconds with 4 significant digits for the percentiles. Two Metrics
// of the same quantity merge losslessly, so shards of one run, or several
// runs, combine into exactly what one aggregate would have measured. The
// zero value is empty and ready to use.
type Metric struct {
	h        *hdrhistogram.Histogram
	n        int64
	mean, m2 float64
	min, max int64
	clamped  int64
}

func (m *Metric) init() {
	if m.h == nil {
		m.h = hdrhistogram.New(1, MaxTrackableUS, 4)
		m.min = math.MaxInt64
		m.max = math.MinInt64
	}
}

// Add records count samples of ns nanoseconds (a negative ns counts as 0).
func (m *Metric) Add(ns int64, count int64) {
	if count <= 0 {
		return
	}
	m.init()
	if ns < 0 {
		ns = 0
	}
	us := (ns + 500) / 1000
	if us > MaxTrackableUS {
		us = MaxTrackableUS
		m.clamped += count
	}
	_ = m.h.RecordValues(us, count) // cannot fail: us is within range
	for range count {
		m.n++
		d := float64(ns) - m.mean
		m.mean += d / float64(m.n)
		m.m2 += d * (float64(ns) - m.mean)
	}
	m.min = min(m.min, ns)
	m.max = max(m.max, ns)
}

// Merge adds every sample of o to m (Chan et al.'s pairwise update for the
// moments; bucket-wise addition for the histogram).
func (m *Metric) Merge(o *Metric) {
	if o == nil || o.n == 0 {
		return
	}
	m.init()
	m.h.Merge(o.h)
	n := m.n + o.n
	d := o.mean - m.mean
	m.mean += d * float64(o.n) / float64(n)
	m.m2 += o.m2 + d*d*float64(m.n)*float64(o.n)/float64(n)
	m.n = n
	m.min = min(m.min, o.min)
	m.max = max(m.max, o.max)
	m.clamped += o.clamped
}

// Count is the number of samples.
func (m *Metric) Count() int64 { return m.n }

// Clamped is the number of samples over MaxTrackableUS.
func (m *Metric) Clamped() int64 { return m.clamped }

// Quantile is the p-th percentile (p in 0..100) in milliseconds, the upper
// edge of its HDR bucket; 0 when empty.
func (m *Metric) Quantile(p float64) float64 {
	if m.n == 0 {
		return 0
	}
	return float64(m.h.ValueAtQuantile(p)) / 1e3
}

// Stats summarizes the metric in milliseconds.
func (m *Metric) Stats() Stats {
	if m.n == 0 {
		return Stats{}
	}
	sd := 0.0
	if m.n > 1 {
		sd = math.Sqrt(m.m2/float64(m.n-1)) / 1e6
	}
	return Stats{
		Count:  m.n,
		Mean:   m.mean / 1e6,
		Stddev: sd,
		Min:    float64(m.min) / 1e6,
		Max:    float64(m.max) / 1e6,
		P50:    m.Quantile(50),
		P90:    m.Quantile(90),
		P95:    m.Quantile(95),
		P99:    m.Quantile(99),
		P999:   m.Quantile(99.9),
	}
}

// metricJSON is a Metric's serialised form: the exact moments and the HDR
// histogram in its standard compressed, base64 encoding (V2), which any
// HdrHistogram implementation decodes.
type metricJSON struct {
	N       int64   `json:"n"`
	MeanNS  float64 `json:"mean_ns"`
	M2      float64 `json:"m2_ns2"`
	MinNS   int64   `json:"min_ns"`
	MaxNS   int64   `json:"max_ns"`
	Clamped int64   `json:"clamped,omitempty"`
	HDR     string  `json:"hdr_us"`
}

// MarshalJSON writes the serialised form.
func (m *Metric) MarshalJSON() ([]byte, error) {
	if m.n == 0 {
		return []byte(`{"n":0,"mean_ns":0,"m2_ns2":0,"min_ns":0,"max_ns":0,"hdr_us":""}`), nil
	}
	b, err := m.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("histogram: %w", err)
	}
	return json.Marshal(
		metricJSON{N: m.n, MeanNS: m.mean, M2: m.m2, MinNS: m.min, MaxNS: m.max, Clamped: m.clamped, HDR: string(b)},
	)
}

// UnmarshalJSON reads the serialised form.
func (m *Metric) UnmarshalJSON(b []byte) error {
	var j metricJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = Metric{}
	if j.N == 0 {
		return nil
	}
	h, err := hdrhistogram.Decode([]byte(j.HDR))
	if err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	if h.TotalCount() != j.N {
		return fmt.Errorf("histogram holds %d samples, n says %d", h.TotalCount(), j.N)
	}
	m.h = h
	m.n = j.N
	m.mean = j.MeanNS
	m.m2 = j.M2
	m.min = j.MinNS
	m.max = j.MaxNS
	m.clamped = j.Clamped
	return nil
}

// StepHistograms is one line of histograms.jsonl: a step's latency
// metrics in their lossless form, with the step's measured window, so
// runs and shards can be merged exactly and any percentile recomputed.
type StepHistograms struct {
	Step        int     `json:"step"`
	Target      string  `json:"target"`
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	// WindowStartNS and WindowEndNS bound the measured (non-warm-up)
	// requests: first intended send to last completion.
	WindowStartNS int64 `json:"window_start_ns"`
	WindowEndNS   int64 `json:"window_end_ns"`
	// Metrics by summary.json's name: ttft_ms, itl_ms, e2e_ms, ...
	Metrics map[string]*Metric `json:"metrics"`
	// Warmup holds the warm-up requests' ttft_ms and e2e_ms, kept apart as
	// summary.json's warmup_summary keeps them.
	Warmup map[string]*Metric `json:"warmup,omitempty"`
}

// Buckets returns the metric's non-empty histogram buckets in increasing
// order: each bucket's value (the upper edge, in milliseconds, as Quantile
// reports it) and the number of samples at or below it. A quantile or a
// resample then needs a binary search, not a walk over every bucket.
func (m *Metric) Buckets() (valuesMS []float64, cumulative []int64) {
	if m.n == 0 {
		return nil, nil
	}
	var total int64
	for _, b := range m.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		total += b.Count
		valuesMS = append(valuesMS, float64(b.To)/1e3)
		cumulative = append(cumulative, total)
	}
	return valuesMS, cumulative
}
