package mockllm

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// emitter writes one request's response against the scheduler's due times
// and records what it wrote. Its per-token path appends to one reused
// buffer (see encoder) and does not allocate.
type emitter struct {
	emitDeps
	w       flushWriter
	j       *job
	st      engine.Stream
	tr      *Truth
	arrival time.Time

	buf       []byte
	headers   bool // response headers written
	started   bool // the encoder's start of stream written
	written   int  // tokens written
	held      engine.Token
	hasHeld   bool      // held was read ahead and opens the next event
	tickFrom  time.Time // pacing origin: the first token's due time
	lastWrite time.Time
	dequeued  time.Time
	left      bool // leave was called
}

// emitDeps is what an emitter needs beyond its request. The server hands
// over these rather than itself, so this list is all the emitter can reach.
type emitDeps struct {
	enc      encoder
	plan     faultPlan
	pace     pacer
	metrics  *metrics
	truth    *truthStore
	clock    truthClock
	shutdown context.Context // ends when Drain gives up or Close is called
	leave    func()          // the request stops counting as generating
}

// flushWriter is what an emitter writes to: gin's writer in the server,
// anything that flushes in benchmarks.
type flushWriter interface {
	http.ResponseWriter
	http.Flusher
}

// end says why emission stopped.
type end int

const (
	endNone     end = iota // keep going
	endDone                // all tokens produced
	endGone                // the client went away
	endShutdown            // Drain or Close ended the stream
)

func newEmitter(d emitDeps, w flushWriter, j *job, st engine.Stream, tr *Truth, arrival time.Time) *emitter {
	if j.stream {
		tr.TokenNS = make([]int64, 0, min(j.outTokens, 4096))
	}
	return &emitter{emitDeps: d, w: w, j: j, st: st, tr: tr, arrival: arrival, buf: make([]byte, 0, 1024)}
}

func (e *emitter) stop() { e.pace.stop() }

// done ends the request's count as generating and closes its engine
// stream, once: before its last write, so a client that has read the end
// and sends its next request never finds this one still counted (by the
// validity watch, or by the load_curve mode's draws).
func (e *emitter) done() {
	if e.left {
		return
	}
	e.left = true
	e.st.Close()
	if e.leave != nil {
		e.leave()
	}
}

// stream writes an SSE response, one event per token group.
func (e *emitter) stream(ctx context.Context) {
	h := e.w.Header()
	h.Set("Content-Type", e.enc.streamContentType())
	h.Set("Cache-Control", "no-cache")
	e.sendFirstByteEarly()
	why := endNone
	for why == endNone {
		tok, w := e.next(ctx)
		if w != endNone {
			why = w
			break
		}
		n, at := 1, e.tick(e.plan.due(tok))
		if e.plan.groups() {
			n, at, why = e.group(ctx, at)
		}
		n, cut := e.plan.cutWithin(e.written, n)
		if !e.pace.until(ctx, at) {
			why = e.why(ctx.Err())
			break
		}
		if n > 0 {
			e.emit(n, at)
		}
		if cut {
			e.cut()
		}
		if why == endNone && e.written == e.j.outTokens {
			why = endDone
		}
	}
	e.finish(why)
}

// emit writes the event of the next n tokens and records it.
func (e *emitter) emit(n int, due time.Time) {
	b := e.appendStart(e.buf[:0])
	b = e.enc.appendTokens(b, e.written, n)
	e.buf = b
	now := e.flush(b)
	e.record(now, n, due)
}

// appendStart adds the encoder's start of stream the first time only: on
// the first token, or on arrival when the first byte goes out early.
func (e *emitter) appendStart(b []byte) []byte {
	if e.started {
		return b
	}
	e.started = true
	return e.enc.appendStart(b)
}

// record books a written token event into the truth and the metrics.
func (e *emitter) record(now time.Time, n int, due time.Time) {
	m := e.metrics
	ns := e.clock.ns(now)
	if e.written == 0 {
		e.tr.FirstTokenNS = ns
		m.ttft.Observe(now.Sub(e.arrival).Seconds())
	} else {
		gap := now.Sub(e.lastWrite).Seconds() / float64(n)
		for range n {
			m.itl.Observe(gap)
		}
	}
	e.lastWrite = now
	e.pace.late(due, now)
	m.genTokens.Add(float64(n))
	e.tr.TokenNS = append(e.tr.TokenNS, ns)
	e.tr.LastTokenNS = ns
	e.tr.CompletionTokens += n
	e.written += n
}

// finish ends a stream: on success the encoder's end (finish chunk, usage
// and [DONE] where the API has them); on shutdown an error event, or a
// plain 503 when nothing was sent yet; when the client left, nothing. The
// truth is stored before the terminating bytes, so a client that has read
// them can fetch it at once.
func (e *emitter) finish(why end) {
	e.done()
	tr := e.tr
	switch why {
	case endDone:
		tr.FinishReason = e.j.finish
	case endShutdown:
		tr.FinishReason, tr.Fault = finishAbort, FaultShutdown
	default:
		tr.FinishReason = finishAbort
	}
	if tr.LastTokenNS == 0 {
		tr.LastTokenNS = e.clock.ns(time.Now())
	}
	if why == endShutdown && !e.headers {
		tr.Status = http.StatusServiceUnavailable
	}
	e.truth.put(*tr)
	e.metrics.observeEnd(tr, e.dequeued, e.arrival)
	b := e.buf[:0]
	switch why {
	case endDone:
		b = e.enc.appendEnd(b, e.written)
	case endShutdown:
		if !e.headers {
			writeAPIError(e.w, e.j.api, unavailable("server is shutting down"))
			return
		}
		b = e.enc.appendError(b, unavailable("server is shutting down"))
	}
	e.buf = b
	if len(b) > 0 {
		e.flush(b)
	}
}

// whole writes a non-streamed response in one piece when its last token is
// due.
func (e *emitter) whole(ctx context.Context) {
	var last engine.Token
	why := endNone
	for why == endNone {
		tok, w := e.next(ctx)
		if w != endNone {
			why = w
			break
		}
		last = tok
	}
	if why == endDone && !e.pace.until(ctx, e.plan.due(last)) {
		why = e.why(ctx.Err())
	}
	if why != endDone {
		e.finish(why)
		return
	}
	e.cutBody()
	e.done()
	body := e.enc.whole()
	now := time.Now()
	ns := e.clock.ns(now)
	tr := e.tr
	tr.FirstTokenNS = ns
	tr.LastTokenNS = ns
	tr.TokenNS = []int64{ns}
	tr.CompletionTokens = e.j.outTokens
	tr.FinishReason = e.j.finish
	e.truth.put(*tr)
	m := e.metrics
	m.ttft.Observe(now.Sub(e.arrival).Seconds())
	m.genTokens.Add(float64(e.j.outTokens))
	m.observeEnd(tr, e.dequeued, e.arrival)
	h := e.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	e.w.WriteHeader(http.StatusOK)
	e.w.Write(body)
	e.pace.late(e.plan.due(last), time.Now())
}

// next returns the next token, or why there is none.
func (e *emitter) next(ctx context.Context) (engine.Token, end) {
	if e.hasHeld {
		e.hasHeld = false
		return e.held, endNone
	}
	tok, ok, err := e.st.Next(ctx)
	switch {
	case err != nil:
		return tok, e.why(err)
	case !ok:
		return tok, endDone
	}
	if e.dequeued.IsZero() {
		e.dequeued = e.st.Dequeued()
		e.tr.DequeuedNS = e.clock.ns(e.dequeued)
	}
	return tok, endNone
}

// why tells a shutdown from a client that left, which a context or engine
// error alone does not: the request's context ends in both cases.
func (e *emitter) why(err error) end {
	if e.shutdown.Err() != nil || errors.Is(err, engine.ErrClosed) {
		return endShutdown
	}
	return endGone
}

// flush writes b and flushes it to the connection, returning the time the
// write began. Taken before the write, it can never be later than a
// client's reading of the bytes (a stamp after Flush returns can be, when
// this goroutine is descheduled in between), so the truth stays a lower
// bound for every client-side measurement.
func (e *emitter) flush(b []byte) time.Time {
	if !e.headers {
		e.w.WriteHeader(http.StatusOK)
		e.headers = true
	}
	now := time.Now()
	e.w.Write(b) // a failed write shows up as the request context ending
	e.w.Flush()
	return now
}
