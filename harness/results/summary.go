package results

import "fmt"

// Summary is summary.json: one entry per step, in run order.
type Summary struct {
	Steps []StepSummary `json:"steps"`
}

// StepSummary aggregates one step's measured requests; warm-up requests
// are counted in Warmup and summarized apart in WarmupSummary. Latencies
// cover successful requests only; failures are counted in Errors.
type StepSummary struct {
	Step        int     `json:"step"`
	Target      string  `json:"target"`
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	API         string  `json:"api,omitempty"`
	Stream      bool    `json:"stream"`

	Requests int                `json:"requests"` // measured (non-warm-up) requests
	OK       int                `json:"ok"`
	Warmup   int                `json:"warmup"`
	Errors   map[ErrorClass]int `json:"errors"`

	TTFT             Stats `json:"ttft_ms"`
	TTFTFromSchedule Stats `json:"ttft_from_schedule_ms"`
	ITL              Stats `json:"itl_ms"`       // token-weighted
	ChunkITL         Stats `json:"chunk_itl_ms"` // one sample per gap between chunks
	TPOT             Stats `json:"tpot_ms"`
	E2E              Stats `json:"e2e_ms"`
	E2EFromSchedule  Stats `json:"e2e_from_schedule_ms"`
	ScheduleLag      Stats `json:"schedule_lag_ms"`
	CapWait          Stats `json:"in_flight_cap_wait_ms"` // requests that waited for max_in_flight
	// RetryWait is Record.RetryWaitNS of the requests retried after a 429:
	// the server's doing, in latency from schedule but not in schedule lag.
	RetryWait       Stats `json:"retry_wait_ms,omitzero"`
	TimeToFirstByte Stats `json:"ttfb_ms"`

	// Clock says which stamps token times came from: "kernel" (every
	// timed request's chunks carried the kernel's receive stamps), "user"
	// (none did: another OS, HTTP/2, or the option refused; run.json says
	// why) or "mixed"; KernelStamped counts the requests timed by the kernel.
	Clock         string `json:"clock"`
	KernelStamped int    `json:"kernel_stamped"`
	// ClientDelay is, per token chunk, user-space read time minus kernel
	// receive time: how long tokens waited for the client, measured.
	ClientDelay Stats `json:"client_delay_ms"`
	// TokenChunks is how many token chunks were timed; ChunksCoalesced of
	// them shared a read with a later event, so their kernel stamp is late
	// by at most CoalescedBound (one sample per request that had any).
	TokenChunks     int64 `json:"token_chunks"`
	ChunksCoalesced int64 `json:"chunks_coalesced"`
	CoalescedBound  Stats `json:"coalesced_error_bound_ms"`

	OutputTokensPerS    float64 `json:"output_tokens_per_s"`
	InputTokensPerS     float64 `json:"input_tokens_per_s"`
	RequestsPerS        float64 `json:"requests_per_s"`
	GoodputRequestsPerS float64 `json:"goodput_requests_per_s"`
	WindowS             float64 `json:"window_s"`
	InputTokens         int64   `json:"input_tokens"`
	OutputTokens        int64   `json:"output_tokens"`
	UsageDiscrepancies  int     `json:"usage_discrepancies"` // requests whose server N_out differs from the count

	WarmupSummary *WarmupSummary `json:"warmup_summary,omitempty"`

	Warnings          []string `json:"warnings"`
	ClientBound       bool     `json:"client_bound"`
	ClientBoundReason string   `json:"client_bound_reason"`
}

// WarmupSummary describes a step's warm-up requests, kept out of the
// step's statistics.
type WarmupSummary struct {
	Requests int                `json:"requests"`
	OK       int                `json:"ok"`
	Errors   map[ErrorClass]int `json:"errors,omitempty"`
	TTFT     Stats              `json:"ttft_ms"`
	E2E      Stats              `json:"e2e_ms"`
}

// Stats summarizes one metric in milliseconds. Count, mean, stddev, min and
// max are exact; percentiles come from an HDR histogram recorded in
// microseconds with 4 significant digits (1 µs steps up to 16 ms, 8 µs at
// 100 ms, 64 µs at 1 s), reported as the upper edge of their bucket.
type Stats struct {
	Count  int64   `json:"count"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	P999   float64 `json:"p999"`
}

// LoadLabel names a step's load the one way the testbed writes it:
// "c=32" for closed-loop concurrency, "r=20/s" for an open-loop rate.
func LoadLabel(concurrency int, rate float64) string {
	if rate > 0 {
		return fmt.Sprintf("r=%g/s", rate)
	}
	return fmt.Sprintf("c=%d", concurrency)
}

// StepLabel names a step for people: its scenario and load, e.g.
// "concurrency c=32", "rate r=20/s", "long_context c=1".
func StepLabel(scenario string, concurrency int, rate float64) string {
	return scenario + " " + LoadLabel(concurrency, rate)
}

// Label is s's StepLabel.
func (s *StepSummary) Label() string { return StepLabel(s.Scenario, s.Concurrency, s.Rate) }
