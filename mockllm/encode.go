package mockllm

import (
	"encoding/json"
	"strconv"
)

// encoder writes one request's response in the wire format of its API, so
// the emitter decides when bytes go out and never what they look like. The
// append methods add to b and return it: a stream reuses one buffer, and
// its per-token path does not allocate. encoding/json runs only off that
// path: for the chunk prefix, a whole body, TGI's last event and errors.
type encoder interface {
	// streamContentType is the Content-Type of a streamed response.
	streamContentType() string
	// appendStart adds what a stream sends before its first token.
	appendStart(b []byte) []byte
	// appendTokens adds the event that carries tokens [from, from+n).
	appendTokens(b []byte, from, n int) []byte
	// appendEnd adds what follows the last token of a complete stream.
	appendEnd(b []byte, written int) []byte
	// appendError adds the event that ends a stream with e.
	appendError(b []byte, e *apiError) []byte
	// whole is the body of a non-streamed response.
	whole() []byte
}

// newEncoder picks j's encoder for the response to request id. created
// stamps the OpenAI responses with the wall clock.
func newEncoder(j *job, id string, created func() int64) encoder {
	switch j.api {
	case apiChat:
		return newChatEncoder(j, id, created)
	case apiCompletions:
		return newCompletionsEncoder(j, id, created)
	default:
		return &tgiEncoder{j: j}
	}
}

// openAIStream is what the chat and completions encoders share: every
// chunk opens with the same prefix, and both end with a finish chunk, an
// optional usage chunk and [DONE].
type openAIStream struct {
	j       *job
	id      string // the response's id: an API prefix and the request id
	created func() int64
	head    []byte // chunk prefix up to and including `"choices":[`
}

func newOpenAIStream(j *job, id, object string, created func() int64) openAIStream {
	// Encoded once here, so a token chunk is this prefix and the token.
	head := append([]byte(nil), `data: {"id":`...)
	head = appendJSONString(head, id)
	head = append(head, `,"object":"`...)
	head = append(head, object...)
	head = append(head, `","created":`...)
	head = strconv.AppendInt(head, created(), 10)
	head = append(head, `,"model":`...)
	head = appendJSONString(head, j.model)
	head = append(head, `,"choices":[`...)
	return openAIStream{j: j, id: id, created: created, head: head}
}

func (o *openAIStream) streamContentType() string { return "text/event-stream; charset=utf-8" }

// appendFinish adds the end of a complete stream. emptyChoice opens the
// finish chunk's choice, the one part that differs between the APIs.
func (o *openAIStream) appendFinish(b []byte, emptyChoice string, written int) []byte {
	b = append(b, o.head...)
	b = append(b, emptyChoice...)
	b = append(b, `,"logprobs":null,"finish_reason":"`...)
	b = append(b, o.j.finish...)
	b = append(b, `","stop_reason":null}]}`+"\n\n"...)
	if o.j.includeUsage {
		b = append(b, o.head...)
		b = append(b, `],"usage":`...)
		b = appendUsage(b, o.j.promptTokens, written)
		b = append(b, "}\n\n"...)
	}
	return append(b, sseDone...)
}

// appendError sends e in the body's error shape, then [DONE] so that
// clients waiting for it stop reading.
func (o *openAIStream) appendError(b []byte, e *apiError) []byte {
	b = append(b, "data: "...)
	b = append(b, openAIErrorJSON(e)...)
	b = append(b, "\n\n"...)
	return append(b, sseDone...)
}

// usage is the request's token counts, as every OpenAI body carries them.
func (o *openAIStream) usage() usageJSON {
	j := o.j
	return usageJSON{PromptTokens: j.promptTokens, TotalTokens: j.promptTokens + j.outTokens,
		CompletionTokens: j.outTokens}
}

const sseDone = "data: [DONE]\n\n"

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// appendUsage writes usageJSON by hand, in its field order, so the end of
// a stream needs no encoding/json.
func appendUsage(b []byte, prompt, completion int) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// openAIErrorBody is vLLM's ErrorResponse: {"error":{message,type,param,code}}.
type openAIErrorBody struct {
	Error openAIError `json:"error"`
}

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

func openAIErrorJSON(e *apiError) []byte {
	body, _ := json.Marshal(openAIErrorBody{Error: openAIError{Message: e.message, Type: e.typ, Param: e.param,
		Code: e.code}}) // strings, ints and nil always marshal
	return body
}
