package mockllm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// A mock with a fixed 10 ms TTFT and 1 ms ITL behind httptest: a prompt of
// exactly 20 tokens, an x-request-id chosen by the client, and the server's
// ground truth for that request.
func Example() {
	p, _ := engine.Preset("ideal")
	p.TTFT, p.ITL = 10*time.Millisecond, time.Millisecond
	srv, err := mockllm.New(mockllm.WithProfile(p), mockllm.WithModel("llama-3-8b"), mockllm.WithSeed(1))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()

	prompt := tokens.Prompt(20, 1)
	body := fmt.Sprintf(`{"model":"llama-3-8b","messages":[{"role":"user","content":%q}],"max_tokens":5}`, prompt)
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("x-request-id", "example-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	fmt.Println(resp.StatusCode, out.Usage.PromptTokens, out.Usage.CompletionTokens)

	truth, _ := srv.Truth("example-1")
	ttft := time.Duration(truth.FirstTokenNS - truth.ArrivalNS)
	fmt.Println(truth.API, truth.CompletionTokens, ttft >= 14*time.Millisecond)
	// Output:
	// 200 30 5
	// chat 5 true
}
