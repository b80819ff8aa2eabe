package mockllm

import (
	"encoding/json"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// completionsEncoder writes vLLM's POST /v1/completions responses.
type completionsEncoder struct{ openAIStream }

func newCompletionsEncoder(j *job, id string, created func() int64) *completionsEncoder {
	return &completionsEncoder{newOpenAIStream(j, "cmpl-"+id, "text_completion", created)}
}

// The pieces of completions chunks around the prefix (openAIStream.head).
const (
	completionsTokenOpen  = `{"index":0,"text":"`
	completionsTokenClose = `","logprobs":null,"finish_reason":null,"stop_reason":null}]}` + "\n\n"
	completionsEmpty      = `{"index":0,"text":""`
)

// appendStart adds nothing: unlike chat, a completions stream has no role
// chunk.
func (c *completionsEncoder) appendStart(b []byte) []byte { return b }

func (c *completionsEncoder) appendTokens(b []byte, from, n int) []byte {
	b = append(b, c.head...)
	b = append(b, completionsTokenOpen...)
	for i := from; i < from+n; i++ {
		b = tokens.AppendToken(b, c.j.textSeed, i)
	}
	return append(b, completionsTokenClose...)
}

func (c *completionsEncoder) appendEnd(b []byte, written int) []byte {
	return c.appendFinish(b, completionsEmpty, written)
}

func (c *completionsEncoder) whole() []byte {
	j := c.j
	choice := completionChoice{Text: tokens.Text(j.textSeed, j.outTokens), FinishReason: j.finish}
	body, _ := json.Marshal(completionResponse{ID: c.id, Object: "text_completion", Created: c.created(),
		Model: j.model, Choices: []completionChoice{choice}, Usage: c.usage()}) // plain structs marshal
	return body
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usageJSON          `json:"usage"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}
