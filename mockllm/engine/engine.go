// Package engine is the mock server's cost model: it decides when each
// generated token of each request is due. Three models implement Scheduler:
// fixed (every request gets the configured TTFT and ITL, whatever the load:
// the ground truth for validating clients), step (one global step loop
// like vLLM's continuous batching, from which queueing, TTFT growth and
// saturation follow) and load_curve (TTFT and ITL drawn from measured
// distributions at the number of requests in flight, for servers that
// slow down under load without a visible shared step; loadcurve.go).
//
// The engine only computes due times against an injectable Clock; the HTTP
// layer in package mockllm sleeps until each due time and writes the token.
// Due times are absolute, so emission never drifts.
//
// The step model follows vLLM V1's scheduler: FCFS waiting queue,
// max_num_seqs, a per-step token budget with chunked prefill, KV cache in
// blocks allocated as sequences grow, preemption by recompute of the most
// recently admitted sequence when a running one cannot grow. A step costs
// β0 + β1·(prefill tokens) + β2·(decode tokens) (+ β3·(context tokens)) µs,
// the linear model fitted on real vLLM runs. Not modelled: prefix caching,
// speculative decoding, long_prefill_token_threshold, CUDA-graph batch-size
// padding.
//
// Profiles come from presets (Preset), YAML files (LoadProfile) and the
// caller's overrides, and are checked by Validate.
//
// Tests run the engine in virtual time: RealClock inside a testing/synctest
// bubble, or a VirtualClock driven by hand (Step advances one engine step).
package engine

import (
	"context"
	"errors"
	"time"
)

// Request is what the HTTP layer asks the engine to generate.
type Request struct {
	ID           string
	PromptTokens int // tokens in the prompt, already counted and checked against MaxModelLen
	OutputTokens int // exact number of tokens to generate (max_tokens resolved; EOS is modelled by the caller)
	// Waited is how long ago the request reached the server when Start is
	// called (parsing, validation): fixed and load_curve modes count TTFT
	// from that arrival (at most a second back), as Profile.TTFT promises.
	// The step model ignores it.
	Waited time.Duration
}

// Token is one generated token's scheduled emission.
type Token struct {
	Index int       // 0-based position in the output
	Due   time.Time // when it must be written; from Clock.Now, so it carries a monotonic reading
}

// Stream yields one request's tokens in order. The caller must call Close
// when done, including when the client went away early, so the engine frees
// the request's batch slot and KV blocks. One goroutine reads a Stream;
// Close may run once reading is over.
type Stream interface {
	// Next returns the next token and true, or false after the last token.
	// In the step model it blocks until the step producing the token has been
	// scheduled; it returns ctx.Err() when ctx ends first.
	Next(ctx context.Context) (Token, bool, error)
	// Dequeued is when the request left the waiting queue (admitted to the
	// running batch). Valid once Next has returned the first token.
	Dequeued() time.Time
	Close()
}

// Scheduler admits requests and schedules their tokens.
type Scheduler interface {
	// Start admits req. It returns ErrQueueFull when the waiting queue is at
	// its limit, or an error when req can never fit (e.g. more KV blocks than
	// the cache holds).
	Start(ctx context.Context, req Request) (Stream, error)
	// Stats is a snapshot for metrics: running and waiting sequences, KV-cache use.
	Stats() Stats
	// Close stops the scheduler's loop; streams still open end with ErrClosed.
	Close()
}

// Stats is a point-in-time view of the scheduler, for /metrics.
type Stats struct {
	Running       int
	Waiting       int
	KVCacheUsage  float64 // 0..1
	Preemptions   uint64  // cumulative
	PromptTokens  uint64  // cumulative prefilled
	DecodedTokens uint64  // cumulative generated
}

// Clock is the engine's time source. Real time in production; virtual time
// in tests, so engine tests run exactly and fast.
type Clock interface {
	Now() time.Time
	// SleepUntil blocks until t (or returns at once when t is past), or until
	// ctx ends, returning ctx.Err().
	SleepUntil(ctx context.Context, t time.Time) error
}

var (
	// ErrQueueFull is returned by Start when the waiting queue is at its limit.
	ErrQueueFull = errors.New("engine: waiting queue full")
	// ErrClosed is returned after the scheduler was closed.
	ErrClosed = errors.New("engine: closed")
)

// ErrTooLong is returned by Start when prompt plus output tokens exceed the
// profile's MaxModelLen.
var ErrTooLong = errors.New("engine: request exceeds max_model_len")
