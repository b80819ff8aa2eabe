package mockllm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// FuzzDecodeRequest drives the request decoder of every API, then the
// whole handler with the same body: any input gets a well-formed answer,
// never a 500 or a panic, and accepted requests respect their limits.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,` +
			`"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url"}]}],` +
			`"max_completion_tokens":2,"min_tokens":1}`,
		`{"prompt":[1,2,3],"max_tokens":2,"ignore_eos":true}`,
		`{"prompt":[[5,6]],"n":1,"seed":-4}`,
		`{"prompt":["x y z"],"max_tokens":1e3}`,
		`{"inputs":"hello","parameters":{"max_new_tokens":2,"details":true,"seed":1}}`,
		`{"messages":null}`, `[]`, `null`, `{"prompt":"` + strings.Repeat("w ", 600) + `"}`,
		`{"max_tokens":9223372036854775807,"prompt":"a"}`,
	} {
		for api := range byte(3) {
			f.Add(api, seed)
		}
	}
	p, err := engine.Preset("ideal")
	if err != nil {
		f.Fatal(err)
	}
	p.TTFT = 0
	p.ITL = time.Nanosecond
	p.MaxModelLen = 512
	s, err := New(WithProfile(p), WithModel("m"), WithAnswerLength(1, 8), WithTruthCapacity(64))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	apis := []string{apiChat, apiCompletions, apiTGI}
	paths := []string{"/v1/chat/completions", "/v1/completions", "/generate"}
	f.Fuzz(func(t *testing.T, apiSel byte, body string) {
		i := int(apiSel) % 3
		j, e := decodeRequest(apis[i], []byte(body), s.lim)
		if e != nil {
			if (e.status != 400 && e.status != 404) || e.message == "" {
				t.Fatalf("decode error %d %q", e.status, e.message)
			}
		} else {
			if j.outTokens < 1 || j.outTokens > j.maxTokens || j.promptTokens < 0 ||
				j.promptTokens+j.maxTokens > p.MaxModelLen || (j.finish != finishStop && j.finish != finishLength) {
				t.Fatalf("accepted job out of bounds: %+v", j)
			}
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, paths[i], strings.NewReader(body)))
		if rec.Code >= 500 || rec.Header().Get("x-request-id") == "" {
			t.Fatalf("status %d, x-request-id %q, body %s", rec.Code, rec.Header().Get("x-request-id"), rec.Body)
		}
		if (e == nil) != (rec.Code == 200) {
			t.Fatalf("decoder said %v, handler answered %d %s", e, rec.Code, rec.Body)
		}
		if rec.Code == 200 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			var v map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("200 body is not JSON: %v", err)
			}
		}
		if rec.Code != 200 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("error body is not JSON: %s", rec.Body)
		}
	})
}
