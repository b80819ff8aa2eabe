package mockllm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// fastServer is a real server with short fixed timings, behind httptest.
func fastServer(t testing.TB, opts ...Option) (*Server, *httptest.Server) {
	t.Helper()
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT = 2 * time.Millisecond
	p.ITL = time.Millisecond
	p.MaxModelLen = 256
	s, err := New(append([]Option{WithProfile(p), WithModel("m"), WithSeed(5)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts
}

func do(t testing.TB, ts *httptest.Server, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	return resp, b
}

// goType matches what Go's JSON errors say and a client should never see.
var goType = regexp.MustCompile(`float64|int64|int32|Go value|Go struct|mockllm\.|json\.|RawMessage`)

func TestBadInput(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t, WithAPIKey("k"), WithMaxBodyBytes(1024))
	auth := []string{"Authorization", "Bearer k"}
	tests := []struct {
		name, path, body string
		hdr              []string
		status           int
		param            string // expected "param" (OpenAI shape), "" for null
		msg              string // substring of the message
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages":`, auth, 400, "", "malformed JSON"},
		{"trailing garbage", "/v1/completions", `{"prompt":"a"} {}`, auth, 400, "", "malformed JSON"},
		{
			"wrong type max_tokens",
			"/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"max_tokens":"5"}`,
			auth,
			400,
			"max_tokens",
			"max_tokens",
		},
		{"wrong type messages", "/v1/chat/completions", `{"messages":"hi"}`, auth, 400, "messages", "messages"},
		{"content of wrong type", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`,
			auth, 400, "messages", "content"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, auth, 400, "messages", "at least one"},
		{"missing role", "/v1/chat/completions", `{"messages":[{"content":"a"}]}`, auth, 400, "messages", "role"},
		{"unknown model", "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"a"}]}`,
			auth, 404, "", "does not exist"},
		{"prompt too long", "/v1/completions", `{"prompt":"` + tokens.Prompt(300, 1) + `"}`,
			auth, 413, "", "exceeds 1024 bytes"},
		{"context too long", "/v1/completions", `{"prompt":"a b c","max_tokens":254}`,
			auth, 400, "prompt", "maximum context length is 256"},
		{"max_tokens zero", "/v1/completions", `{"prompt":"a","max_tokens":0}`, auth, 400, "max_tokens", "at least 1"},
		{"max_tokens negative", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":-3}`, auth, 400, "max_tokens", "at least 1"},
		{"n > 1", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"n":2}`, auth, 400, "n", "n=1"},
		{"min_tokens above max", "/v1/completions", `{"prompt":"a","max_tokens":2,"min_tokens":3}`,
			auth, 400, "min_tokens", "min_tokens"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`,
			auth, 400, "stream_options", "stream=True"},
		{"batched prompts", "/v1/completions", `{"prompt":["a","b"]}`, auth, 400, "prompt", "batched"},
		{"empty token list", "/v1/completions", `{"prompt":[]}`, auth, 400, "prompt", "empty"},
		{"negative token id", "/v1/completions", `{"prompt":[1,-2]}`, auth, 400, "prompt", "token id"},
		{"missing prompt", "/v1/completions", `{}`, auth, 400, "prompt", "required"},
		{"no API key", "/v1/completions", `{"prompt":"a"}`, nil, 401, "", "Unauthorized"},
		{"wrong API key", "/v1/completions", `{"prompt":"a"}`,
			[]string{"Authorization", "Bearer nope"}, 401, "", "Unauthorized"},
		{"unknown fault", "/v1/completions", `{"prompt":"a"}`,
			append([]string{"X-Testbed-Fault", "meteor"}, auth...), 400, "X-Testbed-Fault", "unknown fault"},
		{"unknown route", "/v1/embeddings", `{}`, auth, 404, "", "no route"},
		// Sampling parameters the mock ignores are still typed, as on vLLM.
		{"temperature not a number", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"temperature":"x"}`, auth, 400, "temperature", "valid number"},
		{"top_k not an integer", "/v1/completions", `{"prompt":"a","top_k":1.5}`, auth, 400, "top_k", "valid integer"},
		{"user not a string", "/v1/completions", `{"prompt":"a","user":5}`, auth, 400, "user", "valid string"},
		{"stream not a boolean", "/v1/completions", `{"prompt":"a","stream":"yes"}`, auth, 400, "stream", "valid boolean"},
		{"prompt string escapes", "/v1/completions", `{"prompt":"\x"}`, auth, 400, "", "malformed JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, ts, http.MethodPost, tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id on an error response")
			}
			var e openAIErrorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("not an OpenAI error body: %s (%v)", body, err)
			}
			if !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", e.Error.Message, tc.msg)
			}
			if goType.MatchString(e.Error.Message) {
				t.Errorf("message %q names a Go type", e.Error.Message)
			}
			var param string
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if param != tc.param {
				t.Errorf("param %q, want %q", param, tc.param)
			}
		})
	}
}

func TestTGIErrorsAndInfo(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t, WithLimits(LimitConfig{MaxConcurrency: 7}))
	tests := []struct {
		name, body string
		status     int
		errType    string
	}{
		{"empty inputs", `{"inputs":"  "}`, 422, "validation"},     // TGI validation is 422
		{"missing inputs", `{"parameters":{}}`, 422, "validation"}, // inputs is required
		{"too long", `{"inputs":"a","parameters":{"max_new_tokens":300}}`, 422, "validation"},
		{"malformed", `[`, 422, "validation"}, // bad JSON
	}
	for _, tc := range tests {
		resp, body := do(t, ts, http.MethodPost, "/generate", tc.body)
		var e tgiErrorBody
		if resp.StatusCode != tc.status || json.Unmarshal(body, &e) != nil || e.ErrorType != tc.errType ||
			e.Error == "" {
			t.Errorf("%s: %d %s, want %d with error_type %q", tc.name, resp.StatusCode, body, tc.status, tc.errType)
		}
	}
	resp, body := do(t, ts, http.MethodGet, "/info", "")
	var info map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &info) != nil ||
		info["model_id"] != "m" || info["max_concurrent_requests"] != 7.0 {
		t.Errorf("/info: %d %s", resp.StatusCode, body)
	}
}

// sseData returns the data payloads of an SSE body.
func sseData(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			out = append(out, strings.TrimPrefix(d, " "))
		}
	}
	return out
}

func TestLengthsAndEOS(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t, WithAnswerLength(6, 6))
	tests := []struct {
		name, path, body string
		wantTokens       int
		wantFinish       string
	}{
		{"answer shorter than max_tokens stops", "/v1/completions", `{"prompt":"a","max_tokens":10}`, 6, "stop"},
		{"max_tokens cuts the answer", "/v1/completions", `{"prompt":"a","max_tokens":4}`, 4, "length"},
		{"ignore_eos runs to max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":10,"ignore_eos":true}`,
			10, "length"},
		{"min_tokens delays EOS", "/v1/completions", `{"prompt":"a","max_tokens":10,"min_tokens":8}`, 8, "stop"},
		{"completions default max_tokens is 16", "/v1/completions", `{"prompt":"a","ignore_eos":true}`, 16, "length"},
		{"chat default max is the rest of the context", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"ignore_eos":true}`, 256 - 1 - tokens.ChatTemplateOverhead, "length"},
		{"max_completion_tokens wins over max_tokens", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"max_completion_tokens":3,"ignore_eos":true}`,
			3, "length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, ts, http.MethodPost, tc.path, tc.body)
			var r struct {
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage usageJSON `json:"usage"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || len(r.Choices) != 1 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if r.Usage.CompletionTokens != tc.wantTokens || r.Choices[0].FinishReason != tc.wantFinish {
				t.Errorf("got %d tokens, finish %q; want %d, %q",
					r.Usage.CompletionTokens, r.Choices[0].FinishReason, tc.wantTokens, tc.wantFinish)
			}
			if tc.path == "/v1/completions" && tokens.Count(r.Choices[0].Text) != tc.wantTokens {
				t.Errorf("text has %d tokens, usage says %d", tokens.Count(r.Choices[0].Text), tc.wantTokens)
			}
		})
	}
}

func TestGeneratedTextDeterministic(t *testing.T) {
	t.Parallel()
	body := `{"prompt":"same prompt","max_tokens":8,"seed":11}`
	_, ts1 := fastServer(t)
	_, ts2 := fastServer(t)
	_, a := do(t, ts1, http.MethodPost, "/v1/completions", body)
	_, b := do(t, ts2, http.MethodPost, "/v1/completions", body)
	text := func(b []byte) string {
		var r completionResponse
		json.Unmarshal(b, &r)
		return r.Choices[0].Text
	}
	if text(a) == "" || text(a) != text(b) {
		t.Errorf("same seed and prompt gave %q and %q", text(a), text(b))
	}
	_, c := do(t, ts1, http.MethodPost, "/v1/completions", `{"prompt":"same prompt","max_tokens":8,"seed":12}`)
	if text(c) == text(a) {
		t.Errorf("a different request seed gave the same text %q", text(c))
	}
}

func TestRequestIDAndTruthEndpoints(t *testing.T) {
	t.Parallel()
	s, ts := fastServer(t, WithTruthCapacity(2))
	for _, id := range []string{"a", "b", "c"} {
		resp, _ := do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"x y","max_tokens":3,"stream":true}`,
			"x-request-id", id)
		if got := resp.Header.Get("x-request-id"); got != id {
			t.Errorf("x-request-id %q, want the client's %q", got, id)
		}
	}
	resp, _ := do(t, ts, http.MethodGet, "/health", "")
	if resp.StatusCode != 200 || resp.Header.Get("x-request-id") == "" {
		t.Errorf("/health: %d, x-request-id %q", resp.StatusCode, resp.Header.Get("x-request-id"))
	}
	resp, body := do(t, ts, http.MethodGet, "/testbed/requests/c", "")
	var tr Truth
	if resp.StatusCode != 200 || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("truth of c: %d %s", resp.StatusCode, body)
	}
	if tr.ID != "c" || tr.PromptTokens != 2 || tr.CompletionTokens != 3 || len(tr.TokenNS) != 3 ||
		tr.FirstTokenNS < tr.ArrivalNS || tr.LastTokenNS != tr.TokenNS[2] || tr.FirstTokenNS != tr.TokenNS[0] {
		t.Errorf("truth %+v", tr)
	}
	// TTFT on the server is at least the profile's TTFT.
	if got := time.Duration(tr.FirstTokenNS - tr.ArrivalNS); got < 2*time.Millisecond {
		t.Errorf("server TTFT %v below the configured 2ms", got)
	}
	if resp, _ := do(t, ts, http.MethodGet, "/testbed/requests/a", ""); resp.StatusCode != 404 {
		t.Errorf("evicted truth a: status %d, want 404", resp.StatusCode)
	}
	resp, body = do(t, ts, http.MethodGet, "/testbed/requests", "")
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) != 2 || resp.Header.Get("X-Testbed-Evicted") != "1" || !strings.Contains(lines[0], `"id":"b"`) {
		t.Errorf("JSONL %q, evicted %q", lines, resp.Header.Get("X-Testbed-Evicted"))
	}
	if all, ev := s.Truths(); len(all) != 2 || ev != 1 {
		t.Errorf("Truths: %d, %d evicted", len(all), ev)
	}
}

func TestStartupDelayHealth(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t, WithStartupDelay(time.Hour))
	if resp, _ := do(t, ts, http.MethodGet, "/health", ""); resp.StatusCode != 503 {
		t.Errorf("/health during startup: %d, want 503", resp.StatusCode)
	}
	if resp, _ := do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a"}`); resp.StatusCode != 503 {
		t.Errorf("request during startup: %d, want 503", resp.StatusCode)
	}
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		limits    LimitConfig
		body      string
		okBefore  int    // requests that pass
		kind      string // OpenAI error type of the 429
		remaining string // x-ratelimit-remaining-* header checked on the first response
		header    string
	}{
		// RPM 3: three pass, the fourth waits 20 s for one request to refill.
		{"requests", LimitConfig{RPM: 3}, `{"prompt":"a","max_tokens":1}`,
			3, "requests", "2", "x-ratelimit-remaining-requests"},
		// TPM 100, each request costs 1 prompt + 40 max_tokens = 41: two pass.
		{"tokens", LimitConfig{TPM: 100}, `{"prompt":"a","max_tokens":40}`,
			2, "tokens", "59", "x-ratelimit-remaining-tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := fastServer(t, WithLimits(tc.limits))
			for i := range tc.okBefore {
				resp, body := do(t, ts, http.MethodPost, "/v1/completions", tc.body)
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				}
				if i == 0 && resp.Header.Get(tc.header) != tc.remaining {
					t.Errorf("%s = %q, want %q", tc.header, resp.Header.Get(tc.header), tc.remaining)
				}
			}
			resp, body := do(t, ts, http.MethodPost, "/v1/completions", tc.body)
			var e struct {
				Error struct {
					Type, Code, Message string
				}
			}
			if resp.StatusCode != 429 || json.Unmarshal(body, &e) != nil ||
				e.Error.Type != tc.kind || e.Error.Code != "rate_limit_exceeded" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			ra, err := time.ParseDuration(resp.Header.Get("retry-after") + "s")
			ms, err2 := time.ParseDuration(resp.Header.Get("retry-after-ms") + "ms")
			if err != nil || err2 != nil || ms <= 0 || ra < ms || ra-ms >= time.Second {
				t.Errorf(
					"retry-after %q, retry-after-ms %q",
					resp.Header.Get("retry-after"),
					resp.Header.Get("retry-after-ms"),
				)
			}
			if resp.Header.Get("x-ratelimit-reset-requests") == "" &&
				resp.Header.Get("x-ratelimit-reset-tokens") == "" {
				t.Error("no x-ratelimit-reset-* header on the 429")
			}
		})
	}
}

func TestFormatReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{12 * time.Millisecond, "12ms"},    // below a second: whole ms
		{6600 * time.Millisecond, "6.6s"},  // seconds with a fraction
		{11500 * time.Microsecond, "12ms"}, // rounded up, never promising too early
		{6 * time.Minute, "6m0s"},          // OpenAI writes minutes like Go
		{0, "0s"},                          // nothing to wait for
	}
	for _, tc := range tests {
		if got := formatReset(tc.d); got != tc.want {
			t.Errorf("formatReset(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestMaxConcurrencyOverloaded(t *testing.T) {
	t.Parallel()
	p, _ := engine.Preset("ideal")
	p.TTFT, p.ITL = time.Hour, time.Millisecond // the first request holds its slot
	s, err := New(WithProfile(p), WithLimits(LimitConfig{MaxConcurrency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer func() { ts.Close(); s.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(
			ctx,
			http.MethodPost,
			ts.URL+"/generate",
			strings.NewReader(`{"inputs":"a"}`),
		)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); s.inflight.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("first request never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	resp, body := do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a"}`)
	if resp.StatusCode != 429 || string(body) != `{"error":"Model is overloaded","error_type":"overloaded"}` {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		faults FaultConfig
		header string
		check  func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth)
	}{
		{"server error before first byte", FaultConfig{}, FaultServerError,
			func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth) {
				if resp.StatusCode != 500 || tr.Fault != FaultServerError || tr.Status != 500 {
					t.Errorf("status %d, truth %+v", resp.StatusCode, tr)
				}
			}},
		{"stream cut after 3 tokens", FaultConfig{StreamCutAfter: 3}, FaultStreamCut,
			func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth) {
				// role chunk + 3 tokens, then the connection ends without finish or [DONE].
				if len(data) != 4 || strings.Contains(strings.Join(data, ""), "[DONE]") ||
					tr.CompletionTokens != 3 || tr.Fault != FaultStreamCut {
					t.Errorf("data %q, truth %+v", data, tr)
				}
			}},
		{"stall delays later tokens", FaultConfig{StallDuration: 30 * time.Millisecond}, FaultStall,
			func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth) {
				// Timers never fire early, so the token at the stall is written no
				// sooner than TTFT + k·ITL + stall after arrival.
				plan, _ := s.planFaults("f", FaultStall, 10)
				k := plan.stallAt
				earliest := int64(2*time.Millisecond + time.Duration(k)*time.Millisecond + 30*time.Millisecond)
				if tr.Fault != FaultStall || len(tr.TokenNS) != 10 ||
					tr.TokenNS[k]-tr.ArrivalNS < earliest || data[len(data)-1] != "[DONE]" {
					t.Errorf("stall at %d: token written %v after arrival, want >= %v; truth %+v", k,
						time.Duration(tr.TokenNS[k]-tr.ArrivalNS), time.Duration(earliest), tr)
				}
			}},
		{"pacing groups tokens on a tick", FaultConfig{PacingInterval: 5 * time.Millisecond}, "",
			func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth) {
				// 10 tokens 1 ms apart on 5 ms ticks: the first alone, then 5, then 4.
				if len(tr.TokenNS) != 3 || tr.CompletionTokens != 10 {
					t.Errorf("%d token chunks for %d tokens, want 3 for 10", len(tr.TokenNS), tr.CompletionTokens)
				}
			}},
		{"early first byte", FaultConfig{EarlyFirstByte: true}, "",
			func(t *testing.T, s *Server, resp *http.Response, data []string, tr Truth) {
				if !strings.Contains(data[0], `"role":"assistant"`) || tr.CompletionTokens != 10 {
					t.Errorf("first event %q", data[0])
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ts := fastServer(t, WithFaults(tc.faults))
			var hdr []string
			if tc.header != "" {
				hdr = []string{"X-Testbed-Fault", tc.header}
			}
			hdr = append(hdr, "x-request-id", "f")
			resp, body := do(t, ts, http.MethodPost, "/v1/chat/completions",
				`{"messages":[{"role":"user","content":"a"}],"max_tokens":10,"stream":true}`, hdr...)
			tr, ok := s.Truth("f")
			if !ok {
				t.Fatal("no truth")
			}
			tc.check(t, s, resp, sseData(body), tr)
		})
	}
}

func TestFaultRatesAreSeeded(t *testing.T) {
	t.Parallel()
	s, err := New(WithSeed(1), WithFaults(FaultConfig{ServerErrorRate: 0.3, StallRate: 0.2}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts := map[string]int{}
	const n = 4000
	for i := range n {
		p, e := s.planFaults("req-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "", 100)
		if e != nil {
			t.Fatal(e)
		}
		counts[p.kind]++
		if p2, _ := s.planFaults("req-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "", 100); p2 != p {
			t.Fatal("same id drew different faults")
		}
	}
	// server_error ~ 0.3; stall ~ 0.7 × 0.2 = 0.14 (drawn only when no earlier fault was).
	within := func(got int, p float64) bool { d := float64(got)/n - p; return d < 0.03 && d > -0.03 }
	if !within(counts[FaultServerError], 0.3) || !within(counts[FaultStall], 0.14) {
		t.Errorf("fault counts %v over %d requests", counts, n)
	}
}

func TestDrainEndsStreamsCleanly(t *testing.T) {
	t.Parallel()
	p, _ := engine.Preset("ideal")
	p.TTFT, p.ITL = time.Millisecond, 5*time.Millisecond
	s, err := New(WithProfile(p))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	body := `{"inputs":"a","parameters":{"max_new_tokens":1000}}`
	resp, err := http.Post(ts.URL+"/generate_stream", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first token is out
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain = %v, want the grace deadline", err)
	}
	rest, _ := io.ReadAll(br)
	data := sseData(rest)
	if len(data) == 0 || data[len(data)-1] != `{"error":"server is shutting down","error_type":"unavailable"}` {
		t.Errorf("stream did not end with the shutdown event: %q", data[max(0, len(data)-2):])
	}
	// New requests are refused while draining.
	if r, _ := do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a"}`); r.StatusCode != 503 {
		t.Errorf("request after drain: %d, want 503", r.StatusCode)
	}
	if r, _ := do(t, ts, http.MethodGet, "/health", ""); r.StatusCode != 503 {
		t.Errorf("/health after drain: %d, want 503", r.StatusCode)
	}
}

func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t)
	do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a b","max_tokens":4,"stream":true}`)
	do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a","max_tokens":0}`)
	_, body := do(t, ts, http.MethodGet, "/metrics", "")
	text := string(body)
	for _, want := range []string{
		`vllm:num_requests_running{model_name="m"} 0`,
		`vllm:num_requests_waiting{model_name="m"} 0`,
		`# TYPE vllm:kv_cache_usage_perc gauge`,
		`vllm:prompt_tokens_total{model_name="m"} 2`,
		`vllm:generation_tokens_total{model_name="m"} 4`,
		`vllm:request_success_total{finished_reason="length",model_name="m"} 1`,
		`# TYPE vllm:num_preemptions_total counter`,
		`vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.001"}`,
		`vllm:inter_token_latency_seconds_count{model_name="m"} 3`,
		`vllm:e2e_request_latency_seconds_count{model_name="m"} 1`,
		`vllm:request_queue_time_seconds_count{model_name="m"} 1`,
		`vllm:request_prefill_time_seconds_count{model_name="m"} 1`,
		`vllm:request_decode_time_seconds_bucket{model_name="m",le="7680"} 1`,
		`testbed_mock_emission_lateness_seconds_count 4`,
		`testbed_mock_rejected_total{reason="invalid"} 1`,
		`tgi_queue_size 0`,
		`tgi_batch_current_size 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
