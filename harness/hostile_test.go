package harness_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
)

// The hostile suite: servers that answer with something other than what
// the API promises, and how the harness must class each request. A row is
// either a broken server written as an http.Handler or the real mock with a
// fault configuration; add a row for every new way a server can fail.

// sse answers every request with these events as an event stream.
func sse(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
		}
	}
}

// body answers every request with one body of the given type and status.
func body(status int, ctype, b string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		fmt.Fprint(w, b)
	}
}

// tooManyThenOK answers 429 (Retry-After 50 ms) to every first attempt and
// streams a good answer to a retry, which it knows by the attempt header.
func tooManyThenOK(seen *atomic.Int64) http.HandlerFunc {
	good := sse(tok("a"), tok("b"), finish, "[DONE]")
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		if r.Header.Get(harness.AttemptHeader) == "" {
			seen.Add(1)
			w.Header().Set("Retry-After-Ms", "50")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return
		}
		good(w, r)
	}
}

func tok(s string) string {
	return `{"choices":[{"index":0,"delta":{"content":"` + s + `"},"finish_reason":null}]}`
}

func tgiTok(s string) string {
	return `{"index":1,"token":{"id":1,"text":"` + s + `","logprob":0,"special":false},` +
		`"generated_text":null,"details":null}`
}

const finish = `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`

const completion = `{"choices":[{"message":{"role":"assistant","content":"a b"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":3,"completion_tokens":2}}`

func TestHostileServers(t *testing.T) {
	t.Parallel()
	var first atomic.Int64
	tests := []struct {
		name    string
		handler http.Handler                     // a broken server; nil means the real mock
		faults  mockllm.FaultConfig              // the mock's faults when handler is nil
		header  map[string]string                // extra request headers (the mock's X-Testbed-Fault)
		api     string                           // the target's API; "" is chat
		stream  bool                             // a streaming request
		retries int                              // retry.rate_limited
		want    results.ErrorClass               // "" is success
		check   func(*testing.T, results.Record) // optional further check of each record
	}{
		// Control: a well-formed stream is a success.
		{name: "good stream", handler: sse(tok("a"), tok("b"), finish, "[DONE]"), stream: true},
		// Events that are not JSON are garbage, however the stream ends.
		{name: "invalid JSON events", handler: sse("hello", "world", "[DONE]"), stream: true, want: results.ErrBadResponse},
		// A malformed token event mid-stream (cut short) stops the read.
		{name: "truncated event", handler: sse(tok("a"), `{"choices":[{"delta":{"content":"b"}}]`, "[DONE]"),
			stream: true, want: results.ErrBadResponse},
		// [DONE] and nothing else: finished, but nothing generated.
		{name: "done only", handler: sse("[DONE]"), stream: true, want: results.ErrNoTokens},
		// Valid JSON without a token, then [DONE].
		{name: "no token", handler: sse(`{"id":"x"}`, "[DONE]"), stream: true, want: results.ErrNoTokens},
		// A finish_reason with no token before it.
		{name: "finish without token", handler: sse(finish), stream: true, want: results.ErrNoTokens},
		// Binary data labelled as an event stream holds no event at all.
		{name: "binary data", handler: body(200, "text/event-stream", "\x00\x01\xfe\xff\x89PNG\r\n\x1a\n"),
			stream: true, want: results.ErrBadResponse},
		// A proxy's HTML page with status 200.
		{name: "HTML page to a stream", handler: body(200, "text/html", "<html><body>Gateway</body></html>"),
			stream: true, want: results.ErrBadResponse},
		// The server ignored stream: true and sent one JSON body.
		{name: "JSON body to a stream", handler: body(200, "application/json", completion),
			stream: true, want: results.ErrBadResponse},
		// A 200 whose body is an error is the server's error.
		{name: "error body to a stream", handler: body(200, "application/json", `{"error":{"message":"overloaded"}}`),
			stream: true, want: results.ErrServer, check: errorSays("overloaded")},
		// An error event inside the stream.
		{name: "error event", handler: sse(tok("a"), `{"error":{"message":"engine died"}}`), stream: true,
			want: results.ErrServer, check: errorSays("engine died")},
		// Tokens, then the connection closes without a finish marker.
		{name: "no finish marker", handler: sse(tok("a"), tok("b")), stream: true, want: results.ErrStreamCut},
		// Not streaming: an HTML page is not the API's JSON.
		{name: "HTML page", handler: body(200, "text/html", "<!doctype html><p>hi"), want: results.ErrBadResponse},
		// Not streaming: a 200 carrying an error body.
		{name: "error body", handler: body(200, "application/json", `{"error":"model not loaded"}`),
			want: results.ErrServer, check: errorSays("model not loaded")},
		// Not streaming: JSON, but not a completion.
		{name: "empty object", handler: body(200, "application/json", `{}`), want: results.ErrBadResponse},
		// Not streaming: a completion with no generated token.
		{name: "empty completion", handler: body(200, "application/json",
			`{"choices":[{"message":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":0}}`),
			want: results.ErrNoTokens},
		// Not streaming: a good completion.
		{name: "good completion", handler: body(200, "application/json", completion)},
		// TGI: a token, then the final event with generated_text.
		{name: "tgi good stream", api: harness.APITGI, stream: true, handler: sse(tgiTok("a"),
			`{"index":2,"token":{"id":2,"text":" b","logprob":0,"special":false},"generated_text":"a b",`+
				`"details":{"finish_reason":"length","generated_tokens":2,"seed":null,"input_length":3}}`)},
		// TGI: a final event without a single token.
		{name: "tgi no token", api: harness.APITGI, stream: true, handler: sse(
			`{"index":1,"token":{"id":2,"text":"","logprob":0,"special":true},"generated_text":"",` +
				`"details":{"finish_reason":"eos_token","generated_tokens":0,"seed":null,"input_length":3}}`),
			want: results.ErrNoTokens},
		// TGI: an error event in TGI's shape.
		{name: "tgi error event", api: harness.APITGI, stream: true, handler: sse(tgiTok("a"),
			`{"error":"Request failed during generation","error_type":"generation"}`), want: results.ErrServer},
		// TGI: an HTML page from a proxy in front of it.
		{name: "tgi HTML page", api: harness.APITGI, handler: body(200, "text/html", "<html>login</html>"),
			want: results.ErrBadResponse},
		// A 429 then success on the retry: the wait is kept apart from
		// the client's own schedule lag.
		{name: "429 then ok", handler: tooManyThenOK(&first), stream: true, retries: 2, check: retriedOnce},
		// The real mock: a forced 429 stays a 429 whatever the retries.
		{name: "mock forced 429", header: map[string]string{"X-Testbed-Fault": "rate_limit"},
			faults: mockllm.FaultConfig{RetryAfter: 20 * time.Millisecond}, stream: true, retries: 1,
			want: results.ErrRateLimited},
		// The real mock drawing 429s at random: each retry draws afresh, so
		// with 6 retries at 30 % every request ends well (0.3^7 ≈ 2e-4).
		{name: "mock random 429s", faults: mockllm.FaultConfig{RateLimitRate: 0.3, RetryAfter: 20 * time.Millisecond},
			stream: true, retries: 6, check: retryWaitApart},
		// The real mock cutting streams.
		{name: "mock stream cut", faults: mockllm.FaultConfig{StreamCutRate: 1, StreamCutAfter: 2}, stream: true,
			want: results.ErrStreamCut},
		// The real mock's server error.
		{name: "mock server error", faults: mockllm.FaultConfig{ServerErrorRate: 1}, stream: true, want: results.ErrServer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := ""
			if tc.handler != nil {
				srv := httptest.NewServer(tc.handler)
				t.Cleanup(srv.Close)
				url = srv.URL
			} else {
				_, srv := fixedMock(t, time.Millisecond, time.Millisecond, mockllm.WithFaults(tc.faults))
				url = srv.URL
			}
			p := basePlan(url)
			p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:4")
			p.Targets[0].Headers = tc.header
			if tc.api != "" {
				p.Targets[0].API = tc.api
			}
			stream := tc.stream
			p.Stream = &stream
			p.Retry.RateLimited = tc.retries
			p.Load = harness.Load{Concurrency: []int{2}, Requests: 6}
			res, recs := runRecords(t, p)
			if len(recs) != 6 {
				t.Fatalf("%d records, want 6", len(recs))
			}
			for _, r := range recs {
				if r.ErrorClass != tc.want {
					t.Fatalf("%s: class %q (%s), want %q", r.ID, r.ErrorClass, r.Error, tc.want)
				}
				if tc.want != "" && r.Error == "" {
					t.Errorf("%s: class %q without a message", r.ID, r.ErrorClass)
				}
				if tc.check != nil {
					tc.check(t, r)
				}
			}
			st := res.Summary.Steps[0]
			retried := 0
			for _, r := range recs {
				if r.RetryWaitNS > 0 {
					retried++
				}
			}
			if st.RetryWait.Count != int64(retried) {
				t.Errorf("summary: retry waits of %d requests, records hold %d", st.RetryWait.Count, retried)
			}
			if tc.want != "" && (st.OK != 0 || st.Errors[tc.want] != 6 || st.GoodputRequestsPerS != 0) {
				t.Errorf("summary: ok %d, errors %v, goodput %v; want every request failed",
					st.OK, st.Errors, st.GoodputRequestsPerS)
			}
			if tc.want == "" && st.OK != 6 {
				t.Errorf("summary: ok %d of 6", st.OK)
			}
		})
	}
}

// errorSays checks that the server's message is kept.
func errorSays(s string) func(*testing.T, results.Record) {
	return func(t *testing.T, r results.Record) {
		if !strings.Contains(r.Error, s) {
			t.Errorf("%s: error %q does not keep %q", r.ID, r.Error, s)
		}
	}
}

// retriedOnce: two attempts; the 50 ms wait is in RetryWaitNS, not in the
// schedule lag.
func retriedOnce(t *testing.T, r results.Record) {
	if r.Attempts != 2 || r.RetryWaitNS < 50e6 {
		t.Errorf("%s: attempts %d, retry wait %d ns; want 2 and ≥ 50 ms", r.ID, r.Attempts, r.RetryWaitNS)
	}
	retryWaitApart(t, r)
}

// retryWaitApart: whatever the retries, the waits are in RetryWaitNS (at
// least the mock's 20 ms Retry-After each), so the schedule lag, which
// subtracts them, is the client's own delay before the first attempt.
func retryWaitApart(t *testing.T, r results.Record) {
	if r.Attempts > 1 && r.RetryWaitNS < int64(r.Attempts-1)*20e6 {
		t.Errorf("%s: %d attempts but retry wait %d ns", r.ID, r.Attempts, r.RetryWaitNS)
	}
	if lag := r.ScheduleLagNS(); lag < 0 || r.Attempts > 1 && lag > r.SentNS-r.IntendedNS-int64(r.Attempts-1)*20e6 {
		t.Errorf("%s: schedule lag %d ns includes the retry wait %d ns", r.ID, lag, r.RetryWaitNS)
	}
}
