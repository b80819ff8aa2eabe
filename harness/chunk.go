package harness

import (
	"bytes"
	"encoding/json"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// chunk is what the client needs from one streamed event. It is found by
// scanning bytes for a few keys: decoding every chunk as JSON would cost
// more than everything else on the hot path together. Full decoding
// happens only for the rare chunks that carry usage, details or an error.
type chunk struct {
	text       bool // carries generated text (a role-only or empty delta does not)
	words      int  // whitespace-separated words in the text: the token estimate of a multi-token chunk
	done       bool // [DONE], or TGI's final chunk
	finish     string
	usage      bool
	promptTok  int
	complTok   int
	errMessage string
	invalid    bool // not a JSON object: the stream is not the API's
}

var (
	keyContent   = []byte(`"content"`)
	keyReasoning = []byte(`"reasoning_content"`)
	keyReason2   = []byte(`"reasoning"`)
	keyText      = []byte(`"text"`)
	keyUsage     = []byte(`"usage"`)
	keyFinish    = []byte(`"finish_reason"`)
	keyGenerated = []byte(`"generated_text"`)
	keyError     = []byte(`"error"`)
	doneMarker   = []byte("[DONE]")
)

// valueAfter returns what follows `key` and its colon in b, or nil when key
// is absent. Inside a JSON string every '"' is escaped, so the byte
// sequence `"key"` followed by a colon only occurs as a real key.
func valueAfter(b, key []byte) []byte {
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return nil
		}
		rest := b[i+len(key):]
		j := 0
		for j < len(rest) && jsonSpace(rest[j]) {
			j++
		}
		if j < len(rest) && rest[j] == ':' {
			j++
			for j < len(rest) && jsonSpace(rest[j]) {
				j++
			}
			return rest[j:]
		}
		b = rest
	}
}

// jsonSpace is the JSON grammar's whitespace between tokens, not the tokenizer's.
func jsonSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// textValue reports whether v starts with a non-empty JSON string, and
// how many words it holds by the shared tokenizer's rule. Servers send one
// token per event almost always; when an event carries several, its word
// count is the client's estimate of how many (exact for the mock).
func textValue(v []byte) (nonEmpty bool, words int) {
	words, nonEmpty = tokens.CountQuoted(v)
	return nonEmpty, words
}

// notNull reports whether v starts with a value other than null.
func notNull(v []byte) bool { return len(v) > 0 && v[0] != 'n' }

// parseChunk reads one event's data for the given API. Every event must be
// [DONE] or a JSON object: its first and last bytes are checked always, and
// an event that carries none of the keys the client looks for (suspicious:
// it could be anything) is validated in full. Token events skip the full
// check, which would double the hot path's cost; readStream validates each
// stream's first event in full as well.
func parseChunk(api string, data []byte) chunk {
	var c chunk
	d := bytes.TrimSpace(data)
	if bytes.Equal(d, doneMarker) {
		c.done = true
		return c
	}
	if len(d) < 2 || d[0] != '{' || d[len(d)-1] != '}' {
		c.invalid = true
		return c
	}
	switch api {
	case APITGI:
		// {"index":1,"token":{"id":5,"text":" a","logprob":0,"special":false},"generated_text":null,"details":null}
		c.text, c.words = textValue(valueAfter(data, keyText))
		if notNull(valueAfter(data, keyGenerated)) {
			c.done = true
			decodeTGIFinal(data, &c)
		}
	default:
		key := keyContent
		if api == APICompletions {
			key = keyText
		}
		c.text, c.words = textValue(valueAfter(data, key))
		if !c.text {
			c.text, c.words = textValue(valueAfter(data, keyReasoning))
		}
		if !c.text {
			c.text, c.words = textValue(valueAfter(data, keyReason2))
		}
		if v := valueAfter(data, keyFinish); notNull(v) && len(v) > 0 && v[0] == '"' {
			end := bytes.IndexByte(v[1:], '"')
			if end >= 0 {
				c.finish = string(v[1 : 1+end])
			}
		}
		if v := valueAfter(data, keyUsage); len(v) > 0 && v[0] == '{' {
			decodeUsage(data, &c)
		}
	}
	if v := valueAfter(data, keyError); len(v) > 0 && (v[0] == '{' || v[0] == '"') {
		c.errMessage = errorMessage(data)
	}
	if !c.text && !c.done && !c.usage && c.finish == "" && c.errMessage == "" && !json.Valid(d) {
		c.invalid = true
	}
	return c
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

func decodeUsage(data []byte, c *chunk) {
	var m struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(data, &m) == nil && m.Usage != nil {
		c.usage = true
		c.promptTok = m.Usage.PromptTokens
		c.complTok = m.Usage.CompletionTokens
	}
}

type tgiDetails struct {
	FinishReason    string `json:"finish_reason"`
	GeneratedTokens int    `json:"generated_tokens"`
	InputLength     int    `json:"input_length"`
}

func decodeTGIFinal(data []byte, c *chunk) {
	var m struct {
		Details *tgiDetails `json:"details"`
	}
	if json.Unmarshal(data, &m) == nil && m.Details != nil {
		c.finish = m.Details.FinishReason
		if m.Details.GeneratedTokens > 0 {
			c.usage = true
			c.complTok = m.Details.GeneratedTokens
			c.promptTok = m.Details.InputLength
		}
	}
}

// errorMessage pulls a message out of an OpenAI- or TGI-style error body,
// falling back to the raw text.
func errorMessage(data []byte) string {
	var m struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &m) == nil && len(m.Error) > 0 {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(m.Error, &inner) == nil && inner.Message != "" {
			return truncate(inner.Message, maxErrorBody)
		}
		var s string
		if json.Unmarshal(m.Error, &s) == nil && s != "" {
			return truncate(s, maxErrorBody)
		}
	}
	return truncate(string(data), maxErrorBody)
}

// maxErrorBody bounds the server error text kept in a record.
const maxErrorBody = 512

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
