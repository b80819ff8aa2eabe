package mockllm

import (
	"encoding/json"
	"strconv"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// tgiEncoder writes TGI's POST /generate and /generate_stream responses.
type tgiEncoder struct{ j *job }

// streamContentType has no charset: TGI's SSE responses carry none.
func (t *tgiEncoder) streamContentType() string { return "text/event-stream" }

// appendStart adds nothing: a TGI stream opens with its first token.
func (t *tgiEncoder) appendStart(b []byte) []byte { return b }

// appendTokens adds one event per token even when several share a write:
// TGI's events carry exactly one token each.
func (t *tgiEncoder) appendTokens(b []byte, from, n int) []byte {
	for i := from; i < from+n; i++ {
		b = t.appendToken(b, i)
	}
	return b
}

// appendToken adds token i's event; the last one also carries the
// generated text and details, which is how TGI ends a stream.
func (t *tgiEncoder) appendToken(b []byte, i int) []byte {
	j := t.j
	id := tokens.ID(j.textSeed, i)
	b = append(b, `data:{"index":`...)
	b = strconv.AppendInt(b, int64(i+1), 10)
	b = append(b, `,"token":{"id":`...)
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, `,"text":"`...)
	b = tokens.AppendToken(b, j.textSeed, i)
	b = append(b, `","logprob":`...)
	b = strconv.AppendFloat(b, logprob(id), 'f', -1, 32)
	b = append(b, `,"special":false},"generated_text":`...)
	if i != j.outTokens-1 {
		return append(b, `null,"details":null,"top_tokens":null}`+"\n\n"...)
	}
	b = appendJSONString(b, tokens.Text(j.textSeed, j.outTokens))
	b = append(b, `,"details":{"finish_reason":"`...)
	b = append(b, tgiFinish(j.finish)...)
	b = append(b, `","generated_tokens":`...)
	b = strconv.AppendInt(b, int64(j.outTokens), 10)
	b = append(b, `,"seed":`...)
	if j.tgiSeed != nil {
		b = strconv.AppendInt(b, *j.tgiSeed, 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, `},"top_tokens":null}`+"\n\n"...)
}

// appendEnd adds nothing: the last token's event was final.
func (t *tgiEncoder) appendEnd(b []byte, _ int) []byte { return b }

// appendError sends e as TGI does mid-stream, without a [DONE] after it.
func (t *tgiEncoder) appendError(b []byte, e *apiError) []byte {
	b = append(b, "data:"...)
	b = append(b, tgiErrorJSON(e)...)
	return append(b, "\n\n"...)
}

func (t *tgiEncoder) whole() []byte {
	j := t.j
	r := tgiResponse{GeneratedText: tokens.Text(j.textSeed, j.outTokens)}
	if j.tgiDetails {
		d := &tgiDetails{FinishReason: tgiFinish(j.finish), GeneratedTokens: j.outTokens, Seed: j.tgiSeed,
			Prefill: []tgiToken{}, Tokens: make([]tgiToken, j.outTokens)}
		var buf []byte
		for i := range d.Tokens {
			id := tokens.ID(j.textSeed, i)
			buf = tokens.AppendToken(buf[:0], j.textSeed, i)
			d.Tokens[i] = tgiToken{ID: id, Text: string(buf), Logprob: float32(logprob(id))}
		}
		r.Details = d
	}
	body, _ := json.Marshal(r) // plain structs always marshal
	return body
}

// logprob is a fixed, plausible log-probability per token id.
func logprob(id int) float64 { return -float64(1+(id*7919)%1000) / 1000 }

// tgiFinish is TGI's name for a finish reason: it says eos_token where
// vLLM says stop.
func tgiFinish(reason string) string {
	if reason == finishStop {
		return "eos_token"
	}
	return reason
}

type tgiResponse struct {
	GeneratedText string      `json:"generated_text"`
	Details       *tgiDetails `json:"details,omitempty"`
}

type tgiDetails struct {
	FinishReason    string     `json:"finish_reason"`
	GeneratedTokens int        `json:"generated_tokens"`
	Seed            *int64     `json:"seed"`
	Prefill         []tgiToken `json:"prefill"`
	Tokens          []tgiToken `json:"tokens"`
}

type tgiToken struct {
	ID      int     `json:"id"`
	Text    string  `json:"text"`
	Logprob float32 `json:"logprob"`
	Special bool    `json:"special"`
}

// tgiErrorBody is TGI's error shape.
type tgiErrorBody struct {
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
}

func tgiErrorJSON(e *apiError) []byte {
	body, _ := json.Marshal(tgiErrorBody{Error: e.message, ErrorType: e.tgiType}) // two strings always marshal
	return body
}
