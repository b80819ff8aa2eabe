package results

import "io"

// ErrorClass names why a request failed (Record.ErrorClass); a successful
// request has none. docs/failure.md says when each applies.
type ErrorClass string

// The error classes.
const (
	ErrRateLimited ErrorClass = "rate_limited" // HTTP 429; Record.RetryAfterMS keeps the server's Retry-After
	ErrTimeout     ErrorClass = "timeout"      // a configured timeout fired (connect, idle or whole request)
	ErrServer      ErrorClass = "server_error" // HTTP 5xx, an error event in the stream, or a 2xx whose body is an error
	ErrStreamCut   ErrorClass = "stream_cut"   // connection reset or stream ended before its finish marker
	ErrNoTokens    ErrorClass = "no_tokens"    // the response finished without a single generated token
	ErrBadResponse ErrorClass = "bad_response" // a 2xx that is not the API's format: HTML, invalid JSON, no events
	ErrClient      ErrorClass = "client_error" // HTTP 4xx other than 429
	ErrOther       ErrorClass = "other"        // anything else, e.g. connection refused
	ErrCancelled   ErrorClass = "cancelled"    // the run was interrupted before the request finished
)

// ErrorClasses lists the classes in the order reports show them.
var ErrorClasses = []ErrorClass{
	ErrRateLimited, ErrTimeout, ErrServer, ErrStreamCut, ErrNoTokens, ErrBadResponse, ErrClient, ErrOther, ErrCancelled,
}

// Record is one request, one line of requests.jsonl. Times are nanoseconds
// on the harness's monotonic clock since the run's start; 0 means the event
// did not happen. The metric definitions (docs/metrics.md) are computed
// from these fields alone.
type Record struct {
	ID          string  `json:"id"`
	Target      string  `json:"target"`
	Step        int     `json:"step"`
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	API         string  `json:"api"`
	Stream      bool    `json:"stream"`
	Warmup      bool    `json:"warmup,omitempty"`

	IntendedNS   int64 `json:"intended_ns"`           // t_sched: intended send (open loop) or worker free (closed loop)
	CapWaitNS    int64 `json:"cap_wait_ns,omitempty"` // time spent waiting for the in-flight cap
	SentNS       int64 `json:"sent_ns"`               // t_send: request handed to the HTTP transport
	ConnNS       int64 `json:"conn_ns,omitempty"`     // connection in hand (after DNS, connect, TLS when new)
	WroteNS      int64 `json:"wrote_ns,omitempty"`    // request fully written
	FirstByteNS  int64 `json:"first_byte_ns,omitempty"`
	FirstTokenNS int64 `json:"first_token_ns,omitempty"` // t_ft: first chunk carrying generated text
	// t_last: last chunk carrying generated text (response end when not streaming)
	LastTokenNS int64 `json:"last_token_ns,omitempty"`
	DoneNS      int64 `json:"done_ns"` // response fully read, or the request failed

	DNSNS      int64 `json:"dns_ns,omitempty"`     // DNS lookup duration
	ConnectNS  int64 `json:"connect_ns,omitempty"` // TCP connect duration
	TLSNS      int64 `json:"tls_ns,omitempty"`     // TLS handshake duration
	ConnReused bool  `json:"conn_reused,omitempty"`

	// ChunkGapsNS are the gaps between consecutive token-carrying chunks;
	// chunk i+1 arrived at FirstTokenNS + sum(ChunkGapsNS[:i+1]).
	ChunkGapsNS []int64 `json:"chunk_gaps_ns,omitempty"`
	// ChunkTokens is the number of tokens in each token-carrying chunk, kept
	// only when some chunk carried other than exactly one.
	ChunkTokens []int32 `json:"chunk_tokens,omitempty"`

	// Kernel receive stamps (docs/kernel-stamps.md), present when the
	// connection stamped its reads: the times above are user space, when
	// the client's goroutine read each chunk; these say when its bytes
	// reached the socket, on the same clock. ChunkDelaysNS[i] is token
	// chunk i's user time minus its kernel time (0 when its read carried
	// no stamp): the client's own delay, and the way back to the kernel
	// time of every chunk (Record.KernelChunkTimes).
	FirstTokenKernelNS int64   `json:"first_token_kernel_ns,omitempty"`
	LastTokenKernelNS  int64   `json:"last_token_kernel_ns,omitempty"`
	ChunkDelaysNS      []int64 `json:"chunk_delays_ns,omitempty"`
	// ChunksCoalesced counts token chunks that shared one read with a later
	// event, so their stamp is the later bytes' (late); CoalescedBoundNS is
	// the most any of them can be late by.
	ChunksCoalesced  int   `json:"chunks_coalesced,omitempty"`
	CoalescedBoundNS int64 `json:"coalesced_bound_ns,omitempty"`

	NIn           int  `json:"n_in"`                        // N_in: server usage when reported, else planned
	NOut          int  `json:"n_out"`                       // N_out: server usage when reported, else counted
	NOutCounted   int  `json:"n_out_counted"`               // tokens counted in the stream
	UsageReported bool `json:"usage_reported,omitempty"`    // the server sent usage
	NInPlanned    int  `json:"n_in_planned,omitempty"`      // prompt tokens the dataset asked for (prompt text only)
	MaxTokens     int  `json:"max_tokens,omitempty"`        // output tokens asked for
	NOutDiff      int  `json:"n_out_discrepancy,omitempty"` // server N_out minus counted, when both exist and differ

	Status       int        `json:"status,omitempty"`
	ErrorClass   ErrorClass `json:"error_class,omitempty"`
	Error        string     `json:"error,omitempty"` // error message or the server's error body, truncated
	RetryAfterMS int64      `json:"retry_after_ms,omitempty"`
	Attempts     int        `json:"attempts,omitempty"` // sends, when retried (>1)
	// RetryWaitNS is the time from the first attempt's send to the last's:
	// the rejected attempts and the Retry-After waits between them. It is
	// the server's doing, so it is kept apart from the client's own
	// schedule lag (ScheduleLagNS); SentNS is the last attempt's send.
	RetryWaitNS  int64  `json:"retry_wait_ns,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// ScheduleLagNS is how late the client sent the request's first attempt
// against its schedule: the client's own delay, excluding retry waits.
func (r *Record) ScheduleLagNS() int64 { return r.SentNS - r.IntendedNS - r.RetryWaitNS }

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.ErrorClass == "" }

// Shift moves every point in time of r (not durations, not gaps) by d ns,
// onto another clock, as merging shards does; a time that did not happen
// (0) stays 0. A new time field of Record must be added here.
func (r *Record) Shift(d int64) {
	for _, t := range []*int64{&r.IntendedNS, &r.SentNS, &r.ConnNS, &r.WroteNS, &r.FirstByteNS, &r.FirstTokenNS,
		&r.LastTokenNS, &r.DoneNS, &r.FirstTokenKernelNS, &r.LastTokenKernelNS} {
		if *t != 0 {
			*t += d
		}
	}
}

// ChunkTimes returns the arrival time of every token-carrying chunk,
// rebuilt from FirstTokenNS and ChunkGapsNS.
func (r *Record) ChunkTimes() []int64 {
	if r.FirstTokenNS == 0 {
		return nil
	}
	out := make([]int64, 1, len(r.ChunkGapsNS)+1)
	out[0] = r.FirstTokenNS
	t := r.FirstTokenNS
	for _, g := range r.ChunkGapsNS {
		t += g
		out = append(out, t)
	}
	return out
}

// KernelStamped reports whether r's token times come from kernel stamps.
func (r *Record) KernelStamped() bool {
	return r.FirstTokenKernelNS > 0 && len(r.ChunkDelaysNS) == len(r.ChunkGapsNS)+1
}

// FirstToken is t_ft on the best clock r has: the kernel's when stamped.
func (r *Record) FirstToken() int64 {
	if r.KernelStamped() {
		return r.FirstTokenKernelNS
	}
	return r.FirstTokenNS
}

// LastToken is t_last on the best clock r has: the kernel's when stamped.
func (r *Record) LastToken() int64 {
	if r.KernelStamped() {
		return r.LastTokenKernelNS
	}
	return r.LastTokenNS
}

// KernelChunkTimes returns the kernel arrival time of every token-carrying
// chunk, or nil when r has no kernel stamps.
func (r *Record) KernelChunkTimes() []int64 {
	if !r.KernelStamped() {
		return nil
	}
	out := r.ChunkTimes()
	for i, d := range r.ChunkDelaysNS {
		out[i] -= d
	}
	return out
}

// KernelGap returns the gap between token chunks i and i+1 on the best
// clock r has, from ChunkGapsNS[i] and the two chunks' delays.
func (r *Record) KernelGap(i int) int64 {
	g := r.ChunkGapsNS[i]
	if r.KernelStamped() {
		g += r.ChunkDelaysNS[i] - r.ChunkDelaysNS[i+1]
	}
	return g
}

// ReadRecords reads a requests.jsonl file. A line that does not parse is an
// error naming the line, returned with every record before it; a torn last
// line (a killed run) is ErrTornLine.
func ReadRecords(path string) ([]Record, error) { return ReadLines[Record](path) }

// DecodeRecords reads records, one JSON object per line, from r.
func DecodeRecords(r io.Reader) ([]Record, error) { return DecodeLines[Record](r) }
