package history

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
)

// MetricSpec is a metric people name on the command line: a latency
// histogram and a statistic of it ("ttft_p99", "itl_mean"), or one of a
// step summary's rates ("output_tokens_per_s").
type MetricSpec struct {
	Name     string  // as given, e.g. "ttft_p99"
	Hist     string  // histograms.jsonl key, e.g. "ttft_ms"; "" for a rate
	Quantile float64 // percentile 0..100; -1 for the mean
	Rate     string  // summary rate, e.g. "output_tokens_per_s"
	PerToken bool    // one sample per token, not per request (ITL)
}

// latencies are the histogram metrics by the name people use.
var latencies = map[string]string{
	"ttft": "ttft_ms", "ttft_from_schedule": "ttft_from_schedule_ms", "itl": "itl_ms", "chunk_itl": "chunk_itl_ms",
	"tpot": "tpot_ms", "e2e": "e2e_ms", "e2e_from_schedule": "e2e_from_schedule_ms", "schedule_lag": "schedule_lag_ms",
	"ttfb": "ttfb_ms",
}

// rates are the summary's throughput figures, higher is better.
var rates = map[string]func(*results.StepSummary) float64{
	"output_tokens_per_s":    func(s *results.StepSummary) float64 { return s.OutputTokensPerS },
	"input_tokens_per_s":     func(s *results.StepSummary) float64 { return s.InputTokensPerS },
	"requests_per_s":         func(s *results.StepSummary) float64 { return s.RequestsPerS },
	"goodput_requests_per_s": func(s *results.StepSummary) float64 { return s.GoodputRequestsPerS },
}

// ParseMetric parses a metric name: LATENCY_pQ or LATENCY_mean, where
// LATENCY is ttft, itl, tpot, e2e, ttfb, chunk_itl, schedule_lag,
// ttft_from_schedule or e2e_from_schedule and Q a percentile (p50, p99,
// p999 = 99.9, p99.99); or a rate: output_tokens_per_s, requests_per_s, ….
func ParseMetric(s string) (MetricSpec, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if _, ok := rates[s]; ok {
		return MetricSpec{Name: s, Rate: s}, nil
	}
	i := strings.LastIndex(s, "_")
	if i < 0 {
		return MetricSpec{}, fmt.Errorf(
			"metric %q: want LATENCY_pQ (e.g. ttft_p99), LATENCY_mean or a rate such as output_tokens_per_s",
			s,
		)
	}
	hist, ok := latencies[s[:i]]
	if !ok {
		return MetricSpec{}, fmt.Errorf("metric %q: unknown latency %q (known: %s)", s, s[:i], knownLatencies())
	}
	m := MetricSpec{Name: s, Hist: hist, PerToken: hist == "itl_ms" || hist == "chunk_itl_ms"}
	stat := s[i+1:]
	if stat == "mean" {
		m.Quantile = -1
		return m, nil
	}
	q, err := parsePercentile(stat)
	if err != nil {
		return MetricSpec{}, fmt.Errorf("metric %q: %w", s, err)
	}
	m.Quantile = q
	return m, nil
}

// parsePercentile reads "p50", "p99.9", and "p999" (99.9: in a run of
// three or more digits starting with 9, those after the first two are
// decimals, as in p9999 = 99.99 and p995 = 99.5; p100 stays 100, an error).
func parsePercentile(s string) (float64, error) {
	digits, ok := strings.CutPrefix(s, "p")
	if !ok || digits == "" {
		return 0, fmt.Errorf("statistic %q: want pQ (p50, p99, p999) or mean", s)
	}
	if !strings.Contains(digits, ".") && len(digits) > 2 && digits[0] == '9' {
		digits = digits[:2] + "." + digits[2:]
	}
	q, err := strconv.ParseFloat(digits, 64)
	if err != nil || !(q > 0 && q < 100) || strings.ContainsAny(digits, "eE+-") {
		return 0, fmt.Errorf("statistic %q: the percentile must be a number above 0 and below 100", s)
	}
	return q, nil
}

func knownLatencies() string {
	return "ttft, ttft_from_schedule, itl, chunk_itl, tpot, e2e, e2e_from_schedule, schedule_lag, ttfb"
}

// Value is the metric's value in a step: milliseconds for a latency, the
// rate for a rate; ok is false when the step has no sample of it.
func (m MetricSpec) Value(st *Step) (v float64, ok bool) {
	if m.Rate != "" {
		return rates[m.Rate](&st.Summary), st.Summary.OK > 0
	}
	h := st.Histograms.Metrics[m.Hist]
	if h == nil || h.Count() == 0 {
		return math.NaN(), false
	}
	if m.Quantile < 0 {
		return h.Stats().Mean, true
	}
	return h.Quantile(m.Quantile), true
}

// HigherIsWorse says which way is a regression: up for latencies, down
// for rates.
func (m MetricSpec) HigherIsWorse() bool { return m.Rate == "" }

// Unit is the metric's unit for tables.
func (m MetricSpec) Unit() string {
	if m.Rate != "" {
		return "/s"
	}
	return "ms"
}
