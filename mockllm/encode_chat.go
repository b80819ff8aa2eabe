package mockllm

import (
	"encoding/json"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// chatEncoder writes vLLM's POST /v1/chat/completions responses.
type chatEncoder struct{ openAIStream }

func newChatEncoder(j *job, id string, created func() int64) *chatEncoder {
	return &chatEncoder{newOpenAIStream(j, "chatcmpl-"+id, "chat.completion.chunk", created)}
}

// The pieces of chat chunks around the prefix (openAIStream.head).
const (
	chatRoleChoice = `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` +
		"\n\n"
	chatTokenOpen  = `{"index":0,"delta":{"content":"`
	chatTokenClose = `"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	chatEmpty      = `{"index":0,"delta":{"content":""}`
)

// appendStart adds the role chunk that opens every vLLM chat stream.
func (c *chatEncoder) appendStart(b []byte) []byte {
	b = append(b, c.head...)
	return append(b, chatRoleChoice...)
}

func (c *chatEncoder) appendTokens(b []byte, from, n int) []byte {
	b = append(b, c.head...)
	b = append(b, chatTokenOpen...)
	for i := from; i < from+n; i++ {
		b = tokens.AppendToken(b, c.j.textSeed, i)
	}
	return append(b, chatTokenClose...)
}

func (c *chatEncoder) appendEnd(b []byte, written int) []byte {
	return c.appendFinish(b, chatEmpty, written)
}

func (c *chatEncoder) whole() []byte {
	j := c.j
	msg := chatMessageOut{Role: "assistant", Content: tokens.Text(j.textSeed, j.outTokens), ToolCalls: []any{}}
	body, _ := json.Marshal(chatResponse{ID: c.id, Object: "chat.completion", Created: c.created(), Model: j.model,
		Choices: []chatChoice{{Message: msg, FinishReason: j.finish}}, Usage: c.usage()}) // plain structs marshal
	return body
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usageJSON    `json:"usage"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   *string        `json:"stop_reason"`
}

type chatMessageOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}
