package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/harness/sse"
	"github.com/llm-testbed/testbed/internal/tokens"
)

// client sends one target's requests and times them.
type client struct {
	hc      *http.Client
	tr      *http.Transport
	target  Target
	url     [2]string      // [0] non-streaming, [1] streaming endpoint
	header  [2]http.Header // the same split; shared, read-only: copied per request
	t0      time.Time
	idle    time.Duration
	request time.Duration
	retry   Retry
	stamps  *stampReport // how this client's connections stamp token arrival
}

// AttemptHeader carries a retried request's attempt number (2, 3, ...);
// the first attempt sends none. Servers that inject faults per request
// (the mock) draw afresh for each attempt, so a retry can succeed.
const AttemptHeader = "X-Testbed-Attempt"

var errIdle = errors.New("no data from the server within the idle timeout")

// newClient builds a client for t. maxConns is the highest concurrency the
// run will reach, so the transport keeps at least that many connections
// alive: a pool smaller than the load would make requests queue inside the
// client and hide it.
func newClient(p *Plan, t Target, connection string, t0 time.Time, maxConns int) (*client, error) {
	tlsConf := &tls.Config{
		InsecureSkipVerify: p.TLS.InsecureSkipVerify,
	} //nolint:gosec // opt-in for self-signed test servers
	if p.TLS.CAFile != "" {
		pem, err := os.ReadFile(p.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s holds no PEM certificate", p.TLS.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: p.Timeouts.Connect.D(), KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if t.link != nil {
		dial = t.link.DialContext // through the emulated link, paying its handshake
	}
	stamps := &stampReport{}
	tr := &http.Transport{
		Proxy:               nil, // a proxy would add its own latency to every number
		DialContext:         stampingDialer(dial, p.HTTP == "2", t0, stamps),
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: p.Timeouts.Connect.D(),
		MaxIdleConns:        0, // no limit
		MaxIdleConnsPerHost: max(maxConns, 2) + 16,
		MaxConnsPerHost:     0, // no limit
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // SSE must arrive as written, not through gzip
		DisableKeepAlives:   connection == "new",
		ReadBufferSize:      16 << 10,
	}
	var protos http.Protocols
	if p.HTTP == "2" {
		protos.SetHTTP2(true)
		protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge for http:// targets
	} else {
		protos.SetHTTP1(true)
	}
	tr.Protocols = &protos
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"testbed"}}
	for k, v := range t.Headers {
		h.Set(k, v)
	}
	if t.APIKeyEnv != "" {
		h.Set("Authorization", "Bearer "+os.Getenv(t.APIKeyEnv))
	}
	hs := h.Clone()
	hs.Set("Accept", "text/event-stream")
	return &client{
		hc: &http.Client{Transport: tr}, tr: tr, target: t,
		url: [2]string{endpoint(t, false), endpoint(t, true)}, header: [2]http.Header{h, hs},
		t0: t0, idle: p.Timeouts.Idle.D(), request: p.Timeouts.Request.D(), retry: p.Retry, stamps: stamps,
	}, nil
}

// errH2Stamps is why HTTP/2 streams are stamped in user space.
const errH2Stamps = "HTTP/2 multiplexes streams on one connection read by the transport's own goroutine: " +
	"a read's kernel stamp cannot be tied to one stream's events"

// dialFunc is http.Transport's DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// stampingDialer dials through dial and, for HTTP/1.1, asks the kernel to
// stamp every read (stamp_linux.go), noting in report what it got. An
// emulated link's connection is not a TCP socket: it is stamped in user
// space, and the note says so.
func stampingDialer(dial dialFunc, h2 bool, t0 time.Time, report *stampReport) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if h2 {
			report.refuse(errH2Stamps)
			return conn, nil
		}
		sc, why := stampDial(conn, t0)
		if why != "" {
			report.refuse(why)
		} else {
			report.ok()
		}
		return sc, nil
	}
}

// endpoint is the request URL for t; base URLs may or may not end in /v1.
func endpoint(t Target, stream bool) string {
	base := strings.TrimRight(t.URL, "/")
	switch t.API {
	case APITGI:
		base = strings.TrimSuffix(base, "/v1")
		if stream {
			return base + "/generate_stream"
		}
		return base + "/generate"
	default:
		if !strings.HasSuffix(base, "/v1") {
			base += "/v1"
		}
		if t.API == APICompletions {
			return base + "/completions"
		}
		return base + "/chat/completions"
	}
}

// preflight checks that the target answers HTTP at all, before any load.
// Any response counts, even 404: only an unreachable server is an error.
func (c *client) preflight(ctx context.Context) error {
	u := strings.TrimRight(c.target.URL, "/")
	if c.target.API == APITGI {
		u = strings.TrimSuffix(u, "/v1") + "/info"
	} else {
		if !strings.HasSuffix(u, "/v1") {
			u += "/v1"
		}
		u += "/models"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("target %q: %w", c.target.Name, err)
	}
	for k, v := range c.header[0] {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("target %q is unreachable at %s: %w", c.target.Name, redactURL(c.target.URL), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}

func (c *client) since() int64 { return int64(time.Since(c.t0)) }

// readerPool keeps SSE readers (and their buffers) across requests.
var readerPool = sync.Pool{New: func() any { return sse.NewReader(nil) }}

// do sends rq and fills rec; on 429 it retries as the policy allows,
// keeping rec.IntendedNS so the wait counts in latency from schedule, and
// recording the time spent on rejected attempts and waits in RetryWaitNS
// so it never counts as the client's own schedule lag. Each attempt sends
// its number (X-Testbed-Attempt), so a server that draws faults per
// request, like the mock, draws afresh for a retry.
func (c *client) do(ctx context.Context, rq *Request, rec *results.Record) {
	var firstSent int64
	for attempt := 1; ; attempt++ {
		c.once(ctx, rq, rec, attempt)
		if attempt == 1 {
			firstSent = rec.SentNS
		} else if rec.SentNS > 0 {
			rec.RetryWaitNS = rec.SentNS - firstSent
		}
		if rec.ErrorClass != results.ErrRateLimited || attempt > c.retry.RateLimited {
			if attempt > 1 {
				rec.Attempts = attempt
			}
			return
		}
		wait := time.Duration(rec.RetryAfterMS) * time.Millisecond
		if wait <= 0 {
			wait = time.Second
		}
		wait = min(wait, c.retry.MaxWait.D())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			rec.ErrorClass = results.ErrCancelled
			rec.Error = "run interrupted while waiting to retry a 429"
			rec.Attempts = attempt
			rec.DoneNS = c.since()
			return
		case <-t.C:
		}
		keep := *rec
		*rec = results.Record{
			ID: keep.ID, Target: keep.Target, Step: keep.Step, Scenario: keep.Scenario, Concurrency: keep.Concurrency,
			Rate: keep.Rate, API: keep.API, Stream: keep.Stream, Warmup: keep.Warmup, IntendedNS: keep.IntendedNS,
			CapWaitNS: keep.CapWaitNS, NInPlanned: keep.NInPlanned, MaxTokens: keep.MaxTokens,
			ChunkGapsNS:   keep.ChunkGapsNS[:0],
			ChunkDelaysNS: keep.ChunkDelaysNS[:0],
		}
	}
}

// traceTimes collects httptrace events. They fire on the transport's own
// goroutines (dial, write and read loops), hence the atomics.
type traceTimes struct {
	c                                     *client
	dnsStart, dnsDone, connStart, connEnd atomic.Int64
	tlsStart, tlsDone                     atomic.Int64
	gotConn, wrote, firstByte             atomic.Int64
	reused                                atomic.Bool
	stamps                                atomic.Pointer[connStamps] // the connection's, when it stamps reads
}

func (tt *traceTimes) trace() *httptrace.ClientTrace {
	now := tt.c.since
	return &httptrace.ClientTrace{
		DNSStart:          func(httptrace.DNSStartInfo) { tt.dnsStart.Store(now()) },
		DNSDone:           func(httptrace.DNSDoneInfo) { tt.dnsDone.Store(now()) },
		ConnectStart:      func(string, string) { tt.connStart.CompareAndSwap(0, now()) },
		ConnectDone:       func(string, string, error) { tt.connEnd.Store(now()) },
		TLSHandshakeStart: func() { tt.tlsStart.Store(now()) },
		TLSHandshakeDone:  func(tls.ConnectionState, error) { tt.tlsDone.Store(now()) },
		GotConn: func(i httptrace.GotConnInfo) {
			tt.gotConn.CompareAndSwap(0, now())
			tt.reused.Store(i.Reused)
			tt.stamps.Store(stampsOf(i.Conn))
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { tt.wrote.Store(now()) },
		GotFirstResponseByte: func() { tt.firstByte.CompareAndSwap(0, now()) },
	}
}

func (tt *traceTimes) fill(rec *results.Record) {
	d := func(a, b *atomic.Int64) int64 {
		if x, y := a.Load(), b.Load(); x > 0 && y >= x {
			return y - x
		}
		return 0
	}
	rec.DNSNS, rec.ConnectNS, rec.TLSNS = d(
		&tt.dnsStart,
		&tt.dnsDone,
	), d(
		&tt.connStart,
		&tt.connEnd,
	), d(
		&tt.tlsStart,
		&tt.tlsDone,
	)
	rec.ConnNS = tt.gotConn.Load()
	rec.WroteNS = tt.wrote.Load()
	rec.FirstByteNS = tt.firstByte.Load()
	rec.ConnReused = tt.reused.Load()
}

// once sends rq one time. t_send is taken as the request is handed to the
// transport: before the server can possibly see it, so client TTFT never
// undercuts the server's, and including connection setup (DNS, connect,
// TLS) when no idle connection is at hand, so "new connection per request"
// shows its real cost in TTFT. The setup parts are recorded separately.
func (c *client) once(ctx context.Context, rq *Request, rec *results.Record, attempt int) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.AfterFunc(c.request, func() { cancel(context.DeadlineExceeded) })
	defer deadline.Stop()
	idle := time.AfterFunc(c.idle, func() { cancel(errIdle) })
	defer idle.Stop()

	tt := &traceTimes{c: c}
	mode := 0
	if rec.Stream {
		mode = 1
	}
	hreq, err := http.NewRequestWithContext(
		httptrace.WithClientTrace(reqCtx, tt.trace()),
		http.MethodPost,
		c.url[mode],
		bytes.NewReader(rq.Body),
	)
	if err != nil {
		c.fail(ctx, reqCtx, rec, tt, err)
		return
	}
	h := make(http.Header, len(c.header[mode])+1)
	for k, v := range c.header[mode] {
		h[k] = v
	}
	h["X-Request-Id"] = []string{rec.ID}
	if attempt > 1 {
		h[AttemptHeader] = []string{strconv.Itoa(attempt)}
	}
	hreq.Header = h
	hreq.ContentLength = int64(len(rq.Body))

	rec.SentNS = c.since()
	resp, err := c.hc.Do(hreq)
	if err != nil {
		c.fail(ctx, reqCtx, rec, tt, err)
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		tt.fill(rec)
		rec.DoneNS = c.since()
		rec.Error = errorMessage(body)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			rec.ErrorClass = results.ErrRateLimited
			rec.RetryAfterMS = retryAfter(resp.Header, time.Now())
		case resp.StatusCode >= 500:
			rec.ErrorClass = results.ErrServer
		case resp.StatusCode >= 400:
			rec.ErrorClass = results.ErrClient
		default:
			rec.ErrorClass = results.ErrOther
		}
		return
	}
	if rec.Stream {
		if ct := resp.Header.Get("Content-Type"); ct != "" && !isEventStream(ct) {
			c.readNotStream(ctx, reqCtx, resp.Body, ct, rec, tt)
			return
		}
		var st *connStamps
		if resp.ProtoMajor == 1 {
			st = tt.stamps.Load()
		}
		c.readStream(ctx, reqCtx, resp.Body, idle, rec, tt, st)
	} else {
		c.readWhole(ctx, reqCtx, resp.Body, rec, tt)
	}
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// readNotStream classifies a 2xx answer to a streaming request that is not
// an event stream: an error body is the server's error, anything else
// (an HTML page from a proxy, one JSON body because the server ignored
// stream: true) is a bad response, never a cut stream.
func (c *client) readNotStream(ctx, reqCtx context.Context, body io.Reader, ct string, rec *results.Record,
	tt *traceTimes) {
	b, ok := c.readBody(ctx, reqCtx, body, 64<<10, rec, tt)
	if !ok {
		return
	}
	if msg, ok := errorBody(b); ok {
		rec.ErrorClass = results.ErrServer
		rec.Error = truncate(fmt.Sprintf("HTTP %d with an error body: %s", rec.Status, msg), maxErrorBody)
		return
	}
	rec.ErrorClass = results.ErrBadResponse
	switch {
	case looksHTML(b):
		rec.Error = fmt.Sprintf("an HTML page (Content-Type %s) instead of an event stream", ct)
	case json.Valid(b):
		rec.Error = fmt.Sprintf("one JSON body (Content-Type %s) to a streaming request: the server ignored stream", ct)
	default:
		rec.Error = fmt.Sprintf("Content-Type %s instead of text/event-stream", ct)
	}
}

// errorBody returns the message of a JSON body whose top level has an
// "error" member (OpenAI's and TGI's error shapes).
func errorBody(b []byte) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return "", false
	}
	if e, ok := m["error"]; !ok || string(e) == "null" {
		return "", false
	}
	return errorMessage(b), true
}

// looksHTML reports whether a body starts like an HTML document.
func looksHTML(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '<'
}

// countingReader counts the bytes read through it: a stream that ends
// having sent bytes but no event was not an event stream at all.
type countingReader struct {
	r io.Reader
	n int64
}

func (cr *countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.n += int64(n)
	return n, err
}

// readStream times every event of a streamed response.

// kernelTrack follows one stream's token chunks through its connection's
// stamped reads. Each chunk takes the kernel stamp of the latest read when
// the reader returns it: reads happen only when the reader needs bytes, so
// that is the read that completed the chunk. A chunk that shares its read
// with a later event was stamped late (the stamp is the read's newest
// segment): it is counted, and its error bounded by its read's floor.
type kernelTrack struct {
	body      *stampedBody
	delays    []int64 // per token chunk: user − kernel, 0 when the read carried no stamp
	stamped   bool    // some token chunk had a kernel stamp
	pending   bool    // the latest token chunk's read may yet prove shared
	seq       uint64  // that read
	bound     int64   // its stamp minus its floor
	coalesced int
	maxBound  int64
}

// event settles whether the previous token chunk shared its read with
// this event, and returns the read this event came from.
func (k *kernelTrack) event() readStamp {
	rs := k.body.last
	if k.pending && rs.seq == k.seq {
		k.coalesced++
		k.maxBound = max(k.maxBound, k.bound)
	}
	k.pending = false
	return rs
}

// token notes a token chunk from read rs returned at user time now, and
// returns its arrival time: the kernel's when known, else now.
func (k *kernelTrack) token(rs readStamp, now int64) int64 {
	var d int64
	if rs.kernel > 0 && rs.kernel <= now {
		d = now - rs.kernel
		k.stamped = true
		k.pending = true
		k.seq = rs.seq
		k.bound = max(0, rs.kernel-rs.floor)
	}
	k.delays = append(k.delays, d)
	return now - d
}

// fill writes the kernel side of rec; user-space stamps are already there.
func (k *kernelTrack) fill(rec *results.Record) {
	if !k.stamped {
		rec.ChunkDelaysNS = k.delays[:0]
		return
	}
	rec.ChunkDelaysNS = k.delays
	rec.FirstTokenKernelNS = rec.FirstTokenNS - k.delays[0]
	rec.LastTokenKernelNS = rec.LastTokenNS - k.delays[len(k.delays)-1]
	rec.ChunksCoalesced, rec.CoalescedBoundNS = k.coalesced, k.maxBound
}

// readStream times every event of a streamed response, in user space and,
// when st is the connection's stamp state, by the kernel's receive stamps.
func (c *client) readStream(
	ctx, reqCtx context.Context,
	body io.Reader,
	idle *time.Timer,
	rec *results.Record,
	tt *traceTimes,
	st *connStamps,
) {
	var kt kernelTrack
	kt.delays = rec.ChunkDelaysNS[:0]
	src := body
	if st != nil {
		kt.body = newStampedBody(body, st)
		src = kt.body
	}
	counted := &countingReader{r: src}
	rd := readerPool.Get().(*sse.Reader)
	rd.Reset(counted)
	defer func() { rd.Reset(nil); readerPool.Put(rd) }()
	var (
		first, last  int64
		ntok         int
		events       int
		invalid      string
		lastCompl    int
		usageSeen    bool
		done         bool
		finish       string
		promptTok    int
		complTok     int
		streamErr    string
		gaps         = rec.ChunkGapsNS[:0]
		chunkTokens  []int32
		nTokenChunks int
		rs           readStamp
	)
	var readErr error
	for {
		data, err := rd.Next()
		if err != nil {
			readErr = err
			break
		}
		now := c.since()
		if st != nil {
			rs = kt.event()
		}
		idle.Reset(c.idle)
		ch := parseChunk(c.target.API, data)
		events++
		if ch.invalid || events == 1 && !ch.done && !json.Valid(data) {
			invalid = fmt.Sprintf("event %d is not a JSON object: %q", events, truncate(string(data), 64))
			break
		}
		if ch.errMessage != "" {
			streamErr = ch.errMessage
			break
		}
		if ch.text {
			n := max(1, ch.words)
			if ch.usage && (usageSeen || nTokenChunks == 0) && ch.complTok > lastCompl {
				n = ch.complTok - lastCompl // usage streamed with every chunk
			}
			if first == 0 {
				first = now
			} else {
				gaps = append(gaps, now-last)
			}
			if n != 1 && chunkTokens == nil {
				chunkTokens = make([]int32, nTokenChunks, cap(gaps)+1)
				for i := range chunkTokens {
					chunkTokens[i] = 1
				}
			}
			if chunkTokens != nil {
				chunkTokens = append(chunkTokens, int32(n))
			}
			nTokenChunks++
			if st != nil {
				kt.token(rs, now)
			}
			last = now
			ntok += n
		}
		if ch.usage {
			usageSeen, promptTok, complTok, lastCompl = true, ch.promptTok, ch.complTok, ch.complTok
		}
		if ch.finish != "" {
			finish = ch.finish
		}
		if ch.done {
			done = true
			break
		}
	}
	if done {
		// Read on to the end of the body, so the connection can be reused,
		// but do not let a server that never closes the stream turn a
		// finished request into a timeout.
		idle.Reset(min(c.idle, time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	}
	tt.fill(rec)
	rec.DoneNS = c.since()
	rec.FirstTokenNS, rec.LastTokenNS = first, last
	rec.ChunkGapsNS, rec.ChunkTokens = gaps, chunkTokens
	kt.fill(rec)
	rec.NOutCounted, rec.FinishReason = ntok, finish
	rec.NIn, rec.NOut = rec.NInPlanned, ntok
	if usageSeen {
		rec.UsageReported = true
		if promptTok > 0 {
			rec.NIn = promptTok
		}
		rec.NOut = complTok
		rec.NOutDiff = complTok - ntok
	}
	switch {
	case streamErr != "":
		rec.ErrorClass, rec.Error = results.ErrServer, streamErr
	case invalid != "":
		rec.ErrorClass, rec.Error = results.ErrBadResponse, invalid
	case (done || readErr == io.EOF && finish != "") && ntok == 0:
		rec.ErrorClass = results.ErrNoTokens
		rec.Error = fmt.Sprintf("the stream finished after %d events without a generated token", events)
	case done, readErr == io.EOF && finish != "":
		// complete
	case readErr == io.EOF && events == 0 && counted.n > 0:
		rec.ErrorClass = results.ErrBadResponse
		rec.Error = fmt.Sprintf("%d bytes of body held no server-sent event", counted.n)
	case readErr == io.EOF:
		rec.ErrorClass, rec.Error = results.ErrStreamCut, "stream ended before its finish marker"
	default:
		c.classify(ctx, reqCtx, rec, readErr)
		if rec.ErrorClass == results.ErrOther {
			rec.ErrorClass = results.ErrStreamCut // the connection broke mid-stream
		}
	}
}

// readBody reads a whole body of at most limit bytes and stamps the
// record's end. A read that fails classifies the record (a body cut short
// is a cut stream) and reports false.
func (c *client) readBody(ctx, reqCtx context.Context, body io.Reader, limit int64, rec *results.Record,
	tt *traceTimes) ([]byte, bool) {
	b, err := io.ReadAll(io.LimitReader(body, limit))
	tt.fill(rec)
	rec.DoneNS = c.since()
	if err != nil {
		c.classify(ctx, reqCtx, rec, err)
		if rec.ErrorClass == results.ErrOther {
			rec.ErrorClass = results.ErrStreamCut
		}
		return nil, false
	}
	return b, true
}

// readWhole reads a non-streamed response. There is no first token: the
// whole answer arrives at once, and only E2E is defined.
func (c *client) readWhole(ctx, reqCtx context.Context, body io.Reader, rec *results.Record, tt *traceTimes) {
	b, ok := c.readBody(ctx, reqCtx, body, 64<<20, rec, tt)
	if !ok {
		return
	}
	rec.LastTokenNS = rec.DoneNS
	var m struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage         *usage      `json:"usage"`
		GeneratedText *string     `json:"generated_text"`
		Details       *tgiDetails `json:"details"`
		Error         any         `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		rec.ErrorClass = results.ErrBadResponse
		rec.Error = truncate("response is not the API's JSON: "+err.Error(), maxErrorBody)
		if looksHTML(b) {
			rec.Error = "an HTML page instead of a JSON response"
		}
		return
	}
	if m.Error != nil {
		rec.ErrorClass = results.ErrServer
		rec.Error = truncate(fmt.Sprintf("HTTP %d with an error body: %s", rec.Status, errorMessage(b)), maxErrorBody)
		return
	}
	if len(m.Choices) == 0 && m.GeneratedText == nil {
		rec.ErrorClass, rec.Error = results.ErrBadResponse, "a JSON response with neither choices nor generated_text"
		return
	}
	var text string
	if len(m.Choices) > 0 {
		text = m.Choices[0].Message.Content + m.Choices[0].Text
		rec.FinishReason = m.Choices[0].FinishReason
	}
	if m.GeneratedText != nil {
		text = *m.GeneratedText
	}
	// Without a stream there are no chunks to count; the mock's tokenizer
	// (whitespace words) is the fallback count.
	rec.NOutCounted = tokens.Count(text)
	rec.NIn, rec.NOut = rec.NInPlanned, rec.NOutCounted
	switch {
	case m.Usage != nil:
		rec.UsageReported = true
		rec.NIn = m.Usage.PromptTokens
		rec.NOut = m.Usage.CompletionTokens
	case m.Details != nil && m.Details.GeneratedTokens > 0:
		rec.UsageReported, rec.NOut = true, m.Details.GeneratedTokens
		rec.FinishReason = m.Details.FinishReason
		if m.Details.InputLength > 0 {
			rec.NIn = m.Details.InputLength
		}
	}
	if rec.UsageReported {
		rec.NOutDiff = rec.NOut - rec.NOutCounted
	}
	if rec.NOut == 0 {
		rec.ErrorClass, rec.Error = results.ErrNoTokens, "the response holds no generated token"
	}
}

// fail records a request that got no response.
func (c *client) fail(ctx, reqCtx context.Context, rec *results.Record, tt *traceTimes, err error) {
	tt.fill(rec)
	rec.DoneNS = c.since()
	c.classify(ctx, reqCtx, rec, err)
	var op *net.OpError
	if rec.ErrorClass == results.ErrOther && !(errors.As(err, &op) && op.Op == "dial") && rec.ConnNS > 0 {
		rec.ErrorClass = results.ErrStreamCut // connected, then the connection broke
	}
}

// classify names the cause of err: the run's interruption, one of our
// timeouts, or something else.
func (c *client) classify(ctx, reqCtx context.Context, rec *results.Record, err error) {
	var ne net.Error
	switch cause := context.Cause(reqCtx); {
	case ctx.Err() != nil:
		rec.ErrorClass = results.ErrCancelled
		rec.Error = "run interrupted before the request finished"
		return
	case errors.Is(cause, errIdle):
		rec.ErrorClass, err = results.ErrTimeout, errIdle
	case errors.Is(cause, context.DeadlineExceeded):
		rec.ErrorClass, err = results.ErrTimeout, fmt.Errorf("request timeout %v exceeded", c.request)
	case errors.As(err, &ne) && ne.Timeout():
		rec.ErrorClass = results.ErrTimeout
	default:
		rec.ErrorClass = results.ErrOther
	}
	rec.Error = truncate(err.Error(), maxErrorBody)
}

// retryAfter reads Retry-After (seconds or an HTTP date) or OpenAI's
// retry-after-ms, in milliseconds; 0 when absent.
func retryAfter(h http.Header, now time.Time) int64 {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 {
			return int64(f)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 {
		return int64(f * 1000)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now).Milliseconds())
	}
	return 0
}
