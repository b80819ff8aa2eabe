package harness

import "testing"

func TestParseChunk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, api, data string
		want            chunk
	}{
		// vLLM's first chunk: role only, empty content: not a token.
		{
			"role only",
			APIChat,
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			chunk{},
		},
		// null content is not a token either.
		{"null content", APIChat, `{"choices":[{"delta":{"content":null}}]}`, chunk{}},
		// A content chunk, with spaces around the colon.
		{
			"content",
			APIChat,
			`{"choices":[{"delta":{"content" : "Hi"},"finish_reason":null}]}`,
			chunk{text: true, words: 1},
		},
		// Text that itself mentions "content" (escaped quotes) does not fool the scanner.
		{
			"escaped key in text",
			APIChat,
			`{"choices":[{"delta":{"role":"assistant","content":""},"x":"\"content\":\"a\""}]}`,
			chunk{},
		},
		// Reasoning models stream their thinking as generated tokens.
		{"reasoning", APIChat, `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, chunk{text: true, words: 1}},
		// The finish chunk.
		{"finish", APIChat, `{"choices":[{"delta":{},"finish_reason":"length"}]}`, chunk{finish: "length"}},
		// include_usage's last chunk: empty choices, usage.
		{
			"usage",
			APIChat,
			`{"choices":[],"usage":{"prompt_tokens":138,"completion_tokens":64,"total_tokens":202}}`,
			chunk{usage: true, promptTok: 138, complTok: 64},
		},
		// usage: null on ordinary chunks is ignored.
		{"null usage", APIChat, `{"choices":[{"delta":{"content":"a"}}],"usage":null}`, chunk{text: true, words: 1}},
		// A multi-token event: words estimate the tokens; escaped newlines separate words.
		{"multi", APIChat, `{"choices":[{"delta":{"content":" a b\nc\u0020d"}}]}`, chunk{text: true, words: 4}},
		// Whitespace only is still a token (one), not zero.
		{"newline token", APIChat, `{"choices":[{"delta":{"content":"\n\n"}}]}`, chunk{text: true}},
		// The end marker.
		{"done", APIChat, `[DONE]`, chunk{done: true}},
		// An error event inside the stream.
		{
			"error",
			APIChat,
			`{"error":{"message":"engine died","type":"InternalServerError","code":500}}`,
			chunk{errMessage: "engine died"},
		},
		// Completions carry text, not content.
		{
			"completions",
			APICompletions,
			`{"choices":[{"text":" a","index":0,"finish_reason":null}]}`,
			chunk{text: true, words: 1},
		},
		// An empty completions text is not a token.
		{"completions empty", APICompletions, `{"choices":[{"text":"","finish_reason":null}]}`, chunk{}},
		// Data that is not a JSON object is invalid.
		{"not JSON", APIChat, `hello`, chunk{invalid: true}},
		// An event with none of the keys is validated in full.
		{"invalid object", APIChat, `{"id": x}`, chunk{invalid: true}},
		// A valid object without a token is valid, and not a token.
		{"object without token", APIChat, `{"id":"x"}`, chunk{}},
		// TGI token chunk.
		{
			"tgi token",
			APITGI,
			`{"index":1,"token":{"id":5,"text":" a","logprob":-0.1,"special":false},"generated_text":null,"details":null}`,
			chunk{text: true, words: 1},
		},
		// TGI final chunk: last token plus generated_text and details.
		{
			"tgi final",
			APITGI,
			`{"index":3,"token":{"id":2,"text":" c","logprob":0,"special":false},"generated_text":"a b c","details":{"finish_reason":"length","generated_tokens":3,"seed":null,"input_length":7}}`,
			chunk{text: true, words: 1, done: true, finish: "length", usage: true, complTok: 3, promptTok: 7},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := parseChunk(tc.api, []byte(tc.data)); got != tc.want {
				t.Fatalf("parseChunk = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzParseChunk checks the byte scanner never panics on arbitrary data.
func FuzzParseChunk(f *testing.F) {
	f.Add(`{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":1}}`)
	f.Add(`{"token":{"text":"a"},"generated_text":"a","details":{"generated_tokens":1}}`)
	f.Add(`"content":`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, api := range []string{APIChat, APICompletions, APITGI} {
			_ = parseChunk(api, []byte(s))
		}
	})
}
