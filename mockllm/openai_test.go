package mockllm

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// officialClient is the official OpenAI Go client pointed at a mock behind
// httptest, with retries off so a 429 reaches the caller.
func officialClient(t *testing.T, opts ...Option) (openai.Client, *Server) {
	t.Helper()
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT, p.ITL = 5*time.Millisecond, time.Millisecond
	base := []Option{WithProfile(p), WithModel("llama-3-8b"), WithSeed(3), WithAPIKey("sk-test")}
	s, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
	), s
}

func TestOpenAIClientStreamsWithUsage(t *testing.T) {
	t.Parallel()
	client, s := officialClient(t)
	const promptLen, maxTokens = 40, 12
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "llama-3-8b",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(tokens.Prompt(promptLen, 9))},
		MaxTokens:     openai.Int(maxTokens),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithHeader("x-request-id", "client-1"))
	defer stream.Close()
	acc := openai.ChatCompletionAccumulator{}
	var contentChunks int
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			contentChunks++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	u := acc.Usage
	if u.PromptTokens != promptLen+tokens.ChatTemplateOverhead || u.CompletionTokens != maxTokens ||
		u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v, want prompt %d, completion %d", u, promptLen+tokens.ChatTemplateOverhead, maxTokens)
	}
	if contentChunks != maxTokens {
		t.Errorf("%d content chunks, want %d", contentChunks, maxTokens)
	}
	if got := acc.Choices[0].Message.Content; tokens.Count(got) != maxTokens {
		t.Errorf("accumulated content %q has %d tokens, want %d", got, tokens.Count(got), maxTokens)
	}
	if acc.Choices[0].FinishReason != "length" {
		t.Errorf("finish reason %q, want length", acc.Choices[0].FinishReason)
	}
	tr, ok := s.Truth("client-1")
	if !ok || tr.CompletionTokens != maxTokens || len(tr.TokenNS) != maxTokens {
		t.Errorf("truth %+v, %v", tr, ok)
	}
}

func TestOpenAIClientSeesRateLimit(t *testing.T) {
	t.Parallel()
	client, _ := officialClient(t, WithFaults(FaultConfig{RetryAfter: 2500 * time.Millisecond}))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "llama-3-8b",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}, option.WithHeader("X-Testbed-Fault", "rate_limit"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	if apiErr.StatusCode != 429 {
		t.Errorf("status %d, want 429", apiErr.StatusCode)
	}
	if got := apiErr.Response.Header.Get("retry-after"); got != "3" {
		t.Errorf("retry-after %q, want 3 (2.5 s rounded up)", got)
	}
	if got := apiErr.Response.Header.Get("retry-after-ms"); got != "2500" {
		t.Errorf("retry-after-ms %q, want 2500", got)
	}
	if apiErr.Code != "rate_limit_exceeded" || !strings.Contains(apiErr.Message, "Rate limit reached") {
		t.Errorf("error body code %q message %q", apiErr.Code, apiErr.Message)
	}
}

func TestOpenAIClientWrongKey(t *testing.T) {
	t.Parallel()
	client, _ := officialClient(t)
	_, err := client.Models.List(context.Background(), option.WithAPIKey("wrong"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("error %v, want a 401 *openai.Error", err)
	}
	page, err := client.Models.List(context.Background())
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "llama-3-8b" {
		t.Fatalf("models: %v, %+v", err, page)
	}
}
