package serverside

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultSeries are the metric families a Prometheus source keeps when none
// are configured: the DCGM exporter's GPU state, vLLM's scheduler state and
// token counters, TGI's queue and batch. A name ending in "*" is a prefix.
var DefaultSeries = []string{
	// DCGM exporter (dcgm-exporter default counters and profiling fields)
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
	"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK",
	"DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
	"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "testbed_gpu_xid_errors_total",
	"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_DRAM_ACTIVE",
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
	// vLLM
	"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
	"vllm:gpu_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
	"vllm:request_success_total", "vllm:num_preemptions_total",
	"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total",
	"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hit_rate",
	"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
	// TGI
	"tgi_queue_size", "tgi_batch_current_size", "tgi_batch_current_max_tokens",
	"tgi_request_count", "tgi_request_success",
}

// PrometheusOption configures a Prometheus source.
type PrometheusOption func(*Prometheus)

// WithSeries sets the metric families to keep (default DefaultSeries). A
// name ending in "*" keeps every family with that prefix ("vllm:*").
func WithSeries(names ...string) PrometheusOption {
	return func(p *Prometheus) { p.series = names }
}

// WithHTTPClient sets the client used to scrape (default: a client of its
// own with no overall timeout; each reading is bounded by its context).
func WithHTTPClient(c *http.Client) PrometheusOption { return func(p *Prometheus) { p.client = c } }

// WithBuckets keeps histogram buckets (name_bucket{le=...}) besides _sum
// and _count. Off by default: a vLLM histogram has tens of buckets per
// model, which multiplies the size of every line.
func WithBuckets(on bool) PrometheusOption { return func(p *Prometheus) { p.buckets = on } }

// maxScrapeBytes bounds one /metrics body; a larger one is an error rather
// than an unbounded allocation.
const maxScrapeBytes = 32 << 20

// Prometheus is a Source that scrapes a Prometheus text endpoint.
type Prometheus struct {
	url     string
	client  *http.Client
	series  []string
	buckets bool
	exact   map[string]bool
	prefix  []string
}

// NewPrometheus returns a source scraping url (the full /metrics URL).
func NewPrometheus(url string, opts ...PrometheusOption) (*Prometheus, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("prometheus source: URL %q must start with http:// or https://", url)
	}
	p := &Prometheus{url: url, series: DefaultSeries}
	for _, o := range opts {
		o(p)
	}
	if p.client == nil {
		p.client = &http.Client{}
	}
	if len(p.series) == 0 {
		return nil, fmt.Errorf("prometheus source %s: empty series list", url)
	}
	p.exact = map[string]bool{}
	for _, n := range p.series {
		switch {
		case n == "" || n == "*":
			return nil, fmt.Errorf("prometheus source %s: series %q must name a metric or a prefix", url, n)
		case strings.HasSuffix(n, "*"):
			p.prefix = append(p.prefix, strings.TrimSuffix(n, "*"))
		default:
			p.exact[n] = true
		}
	}
	return p, nil
}

// Name is the scraped URL.
func (p *Prometheus) Name() string { return p.url }

// keep reports whether family name is configured.
func (p *Prometheus) keep(name string) bool {
	if p.exact[name] {
		return true
	}
	for _, pre := range p.prefix {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

// Read scrapes the endpoint once.
func (p *Prometheus) Read(ctx context.Context, s *results.Sample) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", p.url, err)
	}
	// Ask for the classic text format: TextParser reads it, and vLLM, TGI
	// and dcgm-exporter all serve it.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", p.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("scrape %s: HTTP %s", p.url, resp.Status)
	}
	m, err := ParseMetrics(io.LimitReader(resp.Body, maxScrapeBytes), p.keep, p.buckets)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", p.url, err)
	}
	s.Metrics = m
	return nil
}

// ParseMetrics reads the Prometheus text format from r and returns the
// series of the families keep accepts, keyed by SeriesKey. Counters, gauges
// and untyped metrics give one value per series; histograms give name_sum
// and name_count (and name_bucket{le} when buckets is set); summaries give
// name_sum, name_count and name{quantile}.
func ParseMetrics(r io.Reader, keep func(family string) bool, buckets bool) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics text: %w", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !keep(name) {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := labelPairs(m.GetLabel())
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[SeriesKey(name, labels)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[SeriesKey(name, labels)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := m.GetHistogram()
				out[SeriesKey(name+"_sum", labels)] = h.GetSampleSum()
				out[SeriesKey(name+"_count", labels)] = float64(h.GetSampleCount())
				if buckets {
					for _, b := range h.GetBucket() {
						le := strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
						out[SeriesKey(name+"_bucket", append(slices.Clone(labels), [2]string{"le", le}))] = float64(
							b.GetCumulativeCount(),
						)
					}
				}
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				out[SeriesKey(name+"_sum", labels)] = sm.GetSampleSum()
				out[SeriesKey(name+"_count", labels)] = float64(sm.GetSampleCount())
				for _, q := range sm.GetQuantile() {
					qs := strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)
					out[SeriesKey(name, append(slices.Clone(labels), [2]string{"quantile", qs}))] = q.GetValue()
				}
			default: // untyped
				out[SeriesKey(name, labels)] = m.GetUntyped().GetValue()
			}
		}
	}
	// JSON cannot carry NaN or ±Inf; a gauge reporting one (no data yet)
	// is left out rather than breaking the line.
	for k, v := range out {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(out, k)
		}
	}
	return out, nil
}

func labelPairs(ls []*dto.LabelPair) [][2]string {
	out := make([][2]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, [2]string{l.GetName(), l.GetValue()})
	}
	return out
}

// SeriesKey writes a series as Prometheus text does: name{a="x",b="y"},
// labels sorted by name, values quoted; just name when there are none.
func SeriesKey(name string, labels [][2]string) string {
	if len(labels) == 0 {
		return name
	}
	byName := map[string]string{}
	for _, l := range labels {
		byName[l[0]] = l[1]
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(byName)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(byName[k]))
	}
	b.WriteByte('}')
	return b.String()
}
