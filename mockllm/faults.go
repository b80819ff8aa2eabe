package mockllm

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Every fault the mock injects is in this file, so that what a request can
// meet reads in one place: what can be configured, how a request's faults
// are drawn, and where each is applied, before generation (rate_limit,
// server_error) or while a response is written (stream_cut, stall, and the
// stream shaping of TokensPerEvent, PacingInterval and EarlyFirstByte).

// FaultConfig injects faults. Each rate is a probability in [0, 1] drawn
// per request from a hash of the seed, the request id and the attempt
// number (AttemptHeader), so a rerun with the same ids sees the same
// faults and a client's retry of a rejected request draws afresh. The zero value injects nothing. A
// request header "X-Testbed-Fault: rate_limit|server_error|stream_cut|stall"
// forces one fault on that request whatever the rates.
type FaultConfig struct {
	// ServerErrorRate answers 500 before the first byte.
	ServerErrorRate float64
	// RateLimitRate answers 429 with OpenAI's body and headers.
	RateLimitRate float64
	// RetryAfter is the retry-after of an injected 429 (default 1s).
	RetryAfter time.Duration
	// StreamCutRate cuts a stream's connection after StreamCutAfter token
	// chunks (without a terminating chunk, as when a proxy resets it).
	StreamCutRate float64
	// StreamCutAfter is how many tokens are written before a cut; 0 draws
	// it uniformly from [1, output tokens-1].
	StreamCutAfter int
	// StallRate pauses a stream for StallDuration before one token (drawn
	// uniformly past the first); every later token is shifted as well.
	StallRate float64
	// StallDuration is the length of a stall (default 500ms).
	StallDuration time.Duration
	// TokensPerEvent, when > 1, sends that many tokens per SSE event (on
	// the due time of the last of them), as servers that batch output do.
	TokensPerEvent int
	// PacingInterval, when > 0, releases tokens only on a fixed tick from
	// the first token (every token due in a tick goes out together at its
	// end), as gateways that re-chunk streams do.
	PacingInterval time.Duration
	// EarlyFirstByte flushes the response headers and (for chat) the role
	// chunk on arrival, long before the first token: a client that times
	// the first byte instead of the first token is then wrong.
	EarlyFirstByte bool
}

// Fault names, as in X-Testbed-Fault and Truth.Fault.
const (
	FaultRateLimit   = "rate_limit"
	FaultServerError = "server_error"
	FaultStreamCut   = "stream_cut"
	FaultStall       = "stall"
	// FaultShutdown marks a stream ended by Drain or Close.
	FaultShutdown = "shutdown"
)

const (
	defaultStall      = 500 * time.Millisecond
	defaultRetryAfter = time.Second
)

// faultPlan is what will go wrong with one request, and how its stream is
// shaped: the emitter reads this, never the configuration, so one value
// holds everything that bends a response.
type faultPlan struct {
	kind       string        // "" or one of the Fault* names
	cutAfter   int           // stream_cut: tokens written before the cut
	stallAt    int           // stall: index of the first delayed token
	stallFor   time.Duration // stall: delay
	retryAfter time.Duration // rate_limit: the wait the 429 asks for

	// Stream shaping applies to every request alike.
	tokensPerEvent int
	tickEvery      time.Duration // PacingInterval
	earlyFirstByte bool
}

const faultSalt = 0x3c6ef372fe94f82b

// AttemptHeader is the header in which a client numbers a retried
// request's attempts (2, 3, ...; the load harness sends it). The same id
// with another attempt number is another fault draw: otherwise a retry of
// an injected 429 would meet the same 429 forever.
const AttemptHeader = "X-Testbed-Attempt"

// faultKey is the key faults are drawn from: the request id, with the
// attempt number appended from the second attempt on, so first attempts
// draw exactly as before.
func faultKey(id, attempt string) string {
	if n, err := strconv.Atoi(attempt); err == nil && n > 1 {
		return id + "#" + strconv.Itoa(n)
	}
	return id
}

// planFaults draws the faults of request id (at most one: server_error,
// rate_limit, stream_cut, stall are tried in that order), or applies the
// forced one from X-Testbed-Fault. outTokens places cuts and stalls.
func (s *Server) planFaults(id, forced string, outTokens int) (faultPlan, *apiError) {
	f := s.cfg.faults
	base := mix64(uint64(s.cfg.seed)^faultSalt, fingerprintOf(id))
	u := func(k uint64) float64 { return float64(mix64(base, k)>>11) / (1 << 53) }
	p := faultPlan{tokensPerEvent: f.TokensPerEvent, tickEvery: f.PacingInterval, earlyFirstByte: f.EarlyFirstByte}
	switch forced {
	case "":
		switch {
		case u(1) < f.ServerErrorRate:
			p.kind = FaultServerError
		case u(2) < f.RateLimitRate:
			p.kind = FaultRateLimit
		case u(3) < f.StreamCutRate:
			p.kind = FaultStreamCut
		case u(4) < f.StallRate:
			p.kind = FaultStall
		}
	case FaultServerError, FaultRateLimit, FaultStreamCut, FaultStall:
		p.kind = forced
	default:
		return p, badRequest("X-Testbed-Fault", fmt.Sprintf(
			"X-Testbed-Fault: unknown fault %q (want rate_limit, server_error, stream_cut or stall)", forced))
	}
	// A position in [1, outTokens-1], so the stream has tokens on both sides
	// of the fault where it can; 0 when the output is a single token.
	pos := func(k uint64) int {
		if outTokens <= 1 {
			return 0
		}
		return 1 + int(mix64(base, k)%uint64(outTokens-1))
	}
	switch p.kind {
	case FaultRateLimit:
		p.retryAfter = f.RetryAfter
		if p.retryAfter <= 0 {
			p.retryAfter = defaultRetryAfter
		}
	case FaultStreamCut:
		p.cutAfter = pos(5)
		if f.StreamCutAfter > 0 {
			p.cutAfter = min(f.StreamCutAfter, max(outTokens-1, 0))
		}
	case FaultStall:
		p.stallAt = pos(6)
		p.stallFor = f.StallDuration
		if p.stallFor <= 0 {
			p.stallFor = defaultStall
		}
	}
	return p, nil
}

func fingerprintOf(s string) uint64 {
	h := newFingerprint()
	h.add(s)
	return h.sum()
}

// rateLimitError is the 429 of an injected rate_limit, or nil.
func (p *faultPlan) rateLimitError() *apiError {
	if p.kind != FaultRateLimit {
		return nil
	}
	msg := fmt.Sprintf("Rate limit reached for %s on requests per min (RPM): injected fault. Please try again in %s.",
		orgName, formatReset(p.retryAfter))
	e := rateLimited("requests", msg, p.retryAfter)
	e.fault = FaultRateLimit
	return e
}

// serverError is the 500 of an injected server_error, or nil.
func (p *faultPlan) serverError() *apiError {
	if p.kind != FaultServerError {
		return nil
	}
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
		code: http.StatusInternalServerError, message: "Internal server error (injected fault)",
		tgiType: "generation", fault: FaultServerError}
}

// due is a token's emission time, with a stall shifting every token from
// the stall on.
func (p *faultPlan) due(t engine.Token) time.Time {
	if p.kind == FaultStall && t.Index >= p.stallAt {
		return t.Due.Add(p.stallFor)
	}
	return t.Due
}

// sendFirstByteEarly flushes the headers and the start of the stream
// (chat's role chunk) on arrival when the plan says so, long before the
// first token, to catch clients that time the first byte.
func (e *emitter) sendFirstByteEarly() {
	if !e.plan.earlyFirstByte {
		return
	}
	e.buf = e.appendStart(e.buf[:0])
	e.flush(e.buf)
}

// groups reports whether an event may carry more than one token.
func (p *faultPlan) groups() bool { return p.tokensPerEvent > 1 || p.tickEvery > 0 }

// group gathers the tokens that go out in one event with its first, due
// at `at`: TokensPerEvent of them, or with pacing alone every token due in
// the same tick. It returns the event's size and time, and the end of the
// stream when gathering met one; the gathered tokens still go out.
func (e *emitter) group(ctx context.Context, at time.Time) (int, time.Time, end) {
	perEvent := max(e.plan.tokensPerEvent, 1)
	n := 1
	for perEvent == 1 || n < perEvent {
		tok, why := e.next(ctx)
		if why != endNone {
			return n, at, why
		}
		tokAt := e.tick(e.plan.due(tok))
		if perEvent == 1 && tokAt.After(at) {
			e.held, e.hasHeld = tok, true // it opens the next event
			return n, at, endNone
		}
		n++
		at = tokAt
	}
	return n, at, endNone
}

// tick rounds a due time up to the PacingInterval grid, which starts at
// the first token's due time, as a gateway that re-chunks a stream
// releases what it holds only on its tick.
func (e *emitter) tick(due time.Time) time.Time {
	every := e.plan.tickEvery
	if every <= 0 {
		return due
	}
	if e.tickFrom.IsZero() {
		e.tickFrom = due
	}
	ticks := (due.Sub(e.tickFrom) + every - 1) / every
	return e.tickFrom.Add(ticks * every)
}

// cutWithin trims an event of n tokens, after written ones, to those that
// go out before a planned stream cut, and reports whether the cut follows
// the event.
func (p *faultPlan) cutWithin(written, n int) (int, bool) {
	if p.kind != FaultStreamCut || written+n <= p.cutAfter {
		return n, false
	}
	return p.cutAfter - written, true
}

// cutBody cuts a non-streamed response planned for a stream cut: with no
// stream to cut into, the whole body is lost.
func (e *emitter) cutBody() {
	if e.plan.kind == FaultStreamCut {
		e.cut()
	}
}

// cut ends the connection without a terminating chunk, as a proxy reset
// does; the truth is stored first.
func (e *emitter) cut() {
	e.tr.FinishReason = finishAbort
	if e.tr.LastTokenNS == 0 {
		e.tr.LastTokenNS = e.clock.ns(time.Now())
	}
	e.truth.put(*e.tr)
	panic(http.ErrAbortHandler)
}
