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

// TestGPUGaugesExposition: in engine mode /metrics carries dcgm-exporter's
// GPU gauges beside vLLM's, derived from the engine: while a request
// decodes the GPU is busy and its KV blocks sit in the framebuffer; fixed
// mode models no GPU and exposes none.
func TestGPUGaugesExposition(t *testing.T) {
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		body := `{"prompt":"` + tokens.Prompt(2000, 1) + `","max_tokens":5000,"ignore_eos":true,"stream":true}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body) // stay connected until the test ends
			resp.Body.Close()
		}
	}()
	var g engine.GPUState
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g = s.sched.(engine.GPUReporter).GPU()
		if g.Util > 0.5 || time.Now().After(deadline) {
			break
		}
	}
	_, body := do(t, ts, http.MethodGet, "/metrics", "")
	text := string(body)
	for _, want := range []string{
		`# TYPE DCGM_FI_DEV_GPU_UTIL gauge`,
		`DCGM_FI_PROF_SM_ACTIVE{`,
		`DCGM_FI_PROF_DRAM_ACTIVE{`,
		`DCGM_FI_DEV_FB_USED{`,
		`DCGM_FI_DEV_FB_FREE{`,
		`DCGM_FI_DEV_POWER_USAGE{`,
		`DCGM_FI_DEV_POWER_MGMT_LIMIT{Hostname="mock",UUID="GPU-00000000-0000-0000-0000-000000000000",` +
			`device="nvidia0",gpu="0",modelName="testbed mock GPU"} 700`,
		`DCGM_FI_DEV_SM_CLOCK{`,
		`DCGM_FI_DEV_MEM_CLOCK{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if g.Util <= 0.5 || g.FBUsedBytes <= 16<<30 {
		t.Errorf("decoding engine: util %.2f, framebuffer used %.0f B: want busy with KV beyond the weights",
			g.Util, g.FBUsedBytes)
	}
	_, fixed := fastServer(t)
	_, body = do(t, fixed, http.MethodGet, "/metrics", "")
	if strings.Contains(string(body), "DCGM_") {
		t.Error("fixed mode exposes GPU gauges; it models no GPU")
	}
}
