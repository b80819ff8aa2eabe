package mockllm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// TestEngineProfileTiming runs the H100 step model behind the HTTP layer:
// timers never fire early, so the server's TTFT is at least one prefill
// step (β0 + β1·prompt) and token k at least k decode steps (β0 + β2 each) later.
func TestEngineProfileTiming(t *testing.T) {
	t.Parallel()
	p, err := engine.Preset("llama3-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(WithProfile(p), WithModel("m"))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer func() { ts.Close(); s.Close() }()
	const prompt = 500
	resp, body := do(
		t,
		ts,
		http.MethodPost,
		"/v1/completions",
		`{"prompt":"`+tokens.Prompt(
			prompt,
			1,
		)+`","max_tokens":4,"ignore_eos":true,"stream":true}`,
		"x-request-id",
		"e1",
	)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	tr, ok := s.Truth("e1")
	if !ok || len(tr.TokenNS) != 4 {
		t.Fatalf("truth %+v", tr)
	}
	us := func(v float64) int64 { return int64(v * 1e3) }
	if ttft, min := tr.FirstTokenNS-tr.ArrivalNS, us(p.Beta0US+p.Beta1US*prompt); ttft < min {
		t.Errorf("server TTFT %v below one prefill step %v", time.Duration(ttft), time.Duration(min))
	}
	// Token k needs k more decode steps; lateness of one token cannot make
	// a later one early, so the bound holds from arrival.
	for k, at := range tr.TokenNS {
		if min := us(p.Beta0US+p.Beta1US*prompt) + int64(k)*us(p.Beta0US+p.Beta2US); at-tr.ArrivalNS < min {
			t.Errorf("token %d written %v after arrival, before its earliest step end %v", k,
				time.Duration(at-tr.ArrivalNS), time.Duration(min))
		}
	}
}

// TestWaitingQueueFull: with one running slot and one waiting slot, a third
// concurrent request is refused with 503 (the engine's ErrQueueFull).
func TestWaitingQueueFull(t *testing.T) {
	t.Parallel()
	p, err := engine.Preset("llama3-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	p.MaxNumSeqs = 1
	p.MaxNumBatchedTokens = 8192
	p.MaxWaiting = 1
	s, err := New(WithProfile(p))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer func() { ts.Close(); s.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := `{"prompt":"a","max_tokens":5000,"ignore_eos":true,"stream":true}`
	for i := range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(
				ctx,
				http.MethodPost,
				ts.URL+"/v1/completions",
				strings.NewReader(long),
			)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body) // stay connected until the test ends
				resp.Body.Close()
			}
		}()
		want := engine.Stats{Running: 1, Waiting: i}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			st := s.sched.Stats()
			if st.Running == want.Running && st.Waiting == want.Waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("scheduler never reached %+v: %+v", want, st)
			}
		}
	}
	resp, body := do(t, ts, http.MethodPost, "/v1/completions", `{"prompt":"a","max_tokens":1}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "waiting queue is full") {
		t.Errorf("third request: %d %s, want 503 queue full", resp.StatusCode, body)
	}
	_, metrics := do(t, ts, http.MethodGet, "/metrics", "")
	if !strings.Contains(string(metrics), "vllm:num_requests_waiting{model_name=\"testbed-mock\"} 1") {
		t.Errorf("/metrics does not show the waiting request; stats %+v", s.sched.Stats())
	}
}
