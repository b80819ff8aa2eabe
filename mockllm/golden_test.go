package mockllm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenServer is a server whose output is fully deterministic: fixed
// seed, fixed wall clock for "created", fixed profile. Inside a synctest
// bubble its timers run on virtual time, so the recorded truth is exact.
func goldenServer(t *testing.T, opts ...Option) *Server {
	t.Helper()
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT = 100 * time.Millisecond
	p.ITL = 20 * time.Millisecond
	p.MaxModelLen = 4096
	wall := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := []Option{WithPreciseTimers(false), WithProfile(p), WithModel("llama-3-8b"), WithSeed(7),
		WithAnswerLength(3, 3), WithWallClock(func() time.Time { return wall })}
	s, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestGoldenStreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		path   string
		body   string
		header map[string]string
		opts   []Option
	}{
		// vLLM chat stream: role chunk, one chunk per token, finish "length", usage chunk, [DONE].
		{name: "chat_stream_usage", path: "/v1/chat/completions",
			body: `{"model":"llama-3-8b","messages":[{"role":"user","content":"Say hello"}],"max_tokens":2,"stream":true,` +
				`"stream_options":{"include_usage":true}}`},
		// The answer ends on its own (3 tokens, the EOS model) before max_tokens: finish "stop", no usage chunk.
		{name: "chat_stream_stop", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"system","content":"Be brief."},` +
				`{"role":"user","content":[{"type":"text","text":"Say hello"}]}],"max_completion_tokens":10,"stream":true}`},
		// ignore_eos generates to max_tokens despite the 3-token answer.
		{name: "chat_stream_ignore_eos", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":5,"ignore_eos":true,"stream":true}`},
		// Two tokens per SSE event (the tokens_per_event fault).
		{name: "chat_stream_two_per_event", path: "/v1/chat/completions",
			opts: []Option{WithFaults(FaultConfig{TokensPerEvent: 2})},
			body: `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":5,"stream":true}`},
		// Legacy completions stream from a token-id prompt: no role chunk.
		{name: "completions_stream_ids", path: "/v1/completions",
			body: `{"model":"llama-3-8b","prompt":[101,2023,2003],"max_tokens":3,"stream":true,` +
				`"stream_options":{"include_usage":true}}`},
		// TGI stream: data:{...} without a space, the last event carries generated_text and details.
		{name: "tgi_generate_stream", path: "/generate_stream",
			body: `{"inputs":"Say hello","parameters":{"max_new_tokens":3,"seed":42}}`},
		// TGI stream ending on EOS: finish_reason "eos_token".
		{name: "tgi_generate_stream_eos", path: "/generate_stream",
			body: `{"inputs":"Say hello","parameters":{"max_new_tokens":20}}`},
		// Non-streamed bodies carry usage.
		{name: "chat_whole", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":2}`},
		{name: "completions_whole", path: "/v1/completions",
			body: `{"prompt":["Say hello"],"max_tokens":2}`},
		{name: "tgi_generate_details", path: "/generate",
			body: `{"inputs":"Say hello","parameters":{"max_new_tokens":2,"details":true}}`},
		// Errors: vLLM's OpenAI shape and TGI's shape.
		{name: "error_context_too_long", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":5000}`},
		{name: "error_unknown_model", path: "/v1/completions",
			body: `{"model":"gpt-4","prompt":"x"}`},
		{name: "error_tgi_validation", path: "/generate",
			body: `{"inputs":"x","parameters":{"max_new_tokens":0}}`},
		// A forced 429 with OpenAI's headers.
		{name: "error_forced_rate_limit", path: "/v1/chat/completions",
			header: map[string]string{"X-Testbed-Fault": "rate_limit"},
			body:   `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":2}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := goldenServer(t, tc.opts...)
				req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
				req.Header.Set("x-request-id", "req-"+tc.name)
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, req)
				var got bytes.Buffer
				fmt.Fprintf(&got, "status: %d\n", rec.Code)
				for _, h := range []string{"Content-Type", "X-Request-Id", "Retry-After", "Retry-After-Ms"} {
					if v := rec.Header().Get(h); v != "" {
						fmt.Fprintf(&got, "%s: %s\n", h, v)
					}
				}
				fmt.Fprintf(&got, "\n%s", rec.Body.Bytes())
				if tr, ok := s.Truth("req-" + tc.name); ok {
					b, _ := json.Marshal(tr)
					fmt.Fprintf(&got, "\n--- truth\n%s\n", b)
				}
				checkGolden(t, tc.name, got.Bytes())
			})
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; got:\n%s\nwant:\n%s", path, got, want)
	}
}
