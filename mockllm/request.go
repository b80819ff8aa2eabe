package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// API names, as in Truth.API.
const (
	apiChat        = "chat"
	apiCompletions = "completions"
	apiTGI         = "tgi"
)

// Finish reasons.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// Defaults taken from the servers the mock imitates.
const (
	// completionsDefaultMaxTokens is vLLM's CompletionRequest.max_tokens default.
	completionsDefaultMaxTokens = 16
	// tgiDefaultMaxNewTokens is TGI's default max_new_tokens.
	tgiDefaultMaxNewTokens = 100
	// unboundedMaxTokens caps output when neither the request nor the
	// profile's MaxModelLen does.
	unboundedMaxTokens = 1 << 16
)

// job is a decoded, validated request: everything the emission loop needs.
type job struct {
	api          string
	model        string
	stream       bool
	includeUsage bool
	promptTokens int
	maxTokens    int    // resolved cap on output
	outTokens    int    // tokens to generate
	finish       string // finishStop or finishLength
	textSeed     int64  // seed of the generated text
	tgiDetails   bool
	tgiSeed      *int64
}

// chatRequest holds the fields of an OpenAI chat request the mock reads;
// others are accepted and ignored, as vLLM ignores unknown fields.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	sampling
}

// sampling holds the sampling parameters the mock ignores but types, so a
// request vLLM would reject for a wrongly-typed field (temperature: "x")
// is rejected here too.
type sampling struct {
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	PresencePenalty   *float64 `json:"presence_penalty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	User              *string  `json:"user"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is the OpenAI legacy completions request.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	MinTokens     int             `json:"min_tokens"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	N             *int            `json:"n"`
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	sampling
}

// tgiRequest is TGI's /generate and /generate_stream body.
type tgiRequest struct {
	Inputs     *string `json:"inputs"`
	Parameters struct {
		MaxNewTokens      *int     `json:"max_new_tokens"`
		Details           bool     `json:"details"`
		Seed              *int64   `json:"seed"`
		Temperature       *float64 `json:"temperature"`
		TopP              *float64 `json:"top_p"`
		TopK              *int     `json:"top_k"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
		DoSample          *bool    `json:"do_sample"`
	} `json:"parameters"`
}

// limitsForDecode is what decoding needs from the server.
type limitsForDecode struct {
	model       string
	maxModelLen int
	seed        int64
	answerMin   int
	answerMax   int
}

// decodeRequest parses and validates a body for api. Errors are the
// client's: they name the bad field and map to 400 (422 on TGI) or 404.
func decodeRequest(api string, body []byte, lim limitsForDecode) (job, *apiError) {
	switch api {
	case apiChat:
		return decodeChat(body, lim)
	case apiCompletions:
		return decodeCompletion(body, lim)
	default:
		return decodeTGI(body, lim)
	}
}

func decodeChat(body []byte, lim limitsForDecode) (job, *apiError) {
	var r chatRequest
	if e := unmarshal(body, &r); e != nil {
		return job{}, e
	}
	if e := checkModel(r.Model, lim); e != nil {
		return job{}, e
	}
	if len(r.Messages) == 0 {
		return job{}, badRequest("messages", "messages: must hold at least one message")
	}
	h := newFingerprint()
	prompt := tokens.ChatOverhead(len(r.Messages))
	for i, m := range r.Messages {
		if m.Role == "" {
			return job{}, badRequest("messages", fmt.Sprintf("messages[%d].role: is required", i))
		}
		n, e := countContent(m.Content, &h, i)
		if e != nil {
			return job{}, e
		}
		prompt += n
	}
	maxTok := r.MaxTokens
	if r.MaxCompletionTokens != nil {
		maxTok = r.MaxCompletionTokens
	}
	j := job{api: apiChat, model: lim.model, stream: r.Stream, promptTokens: prompt}
	if e := commonChecks(&j, r.StreamOptions, r.N, "messages"); e != nil {
		return job{}, e
	}
	e := resolve(&j, lim, maxTok, -1, r.MinTokens, r.IgnoreEOS, r.Seed, h.sum())
	return j, e
}

func decodeCompletion(body []byte, lim limitsForDecode) (job, *apiError) {
	var r completionRequest
	if e := unmarshal(body, &r); e != nil {
		return job{}, e
	}
	if e := checkModel(r.Model, lim); e != nil {
		return job{}, e
	}
	h := newFingerprint()
	prompt, e := countPrompt(r.Prompt, &h)
	if e != nil {
		return job{}, e
	}
	j := job{api: apiCompletions, model: lim.model, stream: r.Stream, promptTokens: prompt}
	if e := commonChecks(&j, r.StreamOptions, r.N, "prompt"); e != nil {
		return job{}, e
	}
	e = resolve(&j, lim, r.MaxTokens, completionsDefaultMaxTokens, r.MinTokens, r.IgnoreEOS, r.Seed, h.sum())
	return j, e
}

func decodeTGI(body []byte, lim limitsForDecode) (job, *apiError) {
	var r tgiRequest
	if e := unmarshal(body, &r); e != nil {
		return job{}, e
	}
	if r.Inputs == nil || strings.TrimSpace(*r.Inputs) == "" {
		return job{}, badRequest("inputs", "Input validation error: `inputs` cannot be empty")
	}
	h := newFingerprint()
	h.add(*r.Inputs)
	j := job{api: apiTGI, model: lim.model, promptTokens: tokens.Count(*r.Inputs),
		tgiDetails: r.Parameters.Details, tgiSeed: r.Parameters.Seed}
	if mt := r.Parameters.MaxNewTokens; mt != nil && *mt <= 0 {
		return job{}, badRequest("max_new_tokens", fmt.Sprintf(
			"Input validation error: `max_new_tokens` must be strictly positive, got %d", *mt))
	}
	if mt, ml := r.Parameters.MaxNewTokens, lim.maxModelLen; mt != nil && ml > 0 && j.promptTokens+*mt > ml {
		return job{}, badRequest("max_new_tokens", fmt.Sprintf("Input validation error: "+
			"`inputs` tokens + `max_new_tokens` must be <= %d. Given: %d `inputs` tokens and %d `max_new_tokens`",
			ml, j.promptTokens, *mt))
	}
	// TGI generates until EOS or max_new_tokens, like ignore_eos=false.
	e := resolve(&j, lim, r.Parameters.MaxNewTokens, tgiDefaultMaxNewTokens, 0, false, r.Parameters.Seed, h.sum())
	return j, e
}

// unmarshal decodes body into v, turning decoder errors into 400s that
// name the field.
func unmarshal(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(v)
	if err == nil {
		// A second value after the object is malformed JSON too.
		if _, err2 := dec.Token(); !errors.Is(err2, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := strings.TrimPrefix(te.Field, "sampling.") // the embedded struct is not in the JSON
		if field == "" {
			field = "body"
		}
		return badRequest(field, fmt.Sprintf("%s: Input should be %s, got JSON %s", field, jsonKind(te.Type), te.Value))
	}
	return badRequest("", fmt.Sprintf("malformed JSON body: %v", err))
}

// jsonProblem describes a decoding error without Go's type names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		where := te.Field
		if where == "" {
			where = "value"
		}
		return fmt.Sprintf("%s: Input should be %s, got JSON %s", where, jsonKind(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	}
	return "malformed JSON"
}

// jsonKind names what a Go type accepts in JSON's words, so no Go type
// name reaches a client.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a valid value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a valid boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a valid integer"
	case reflect.Float32, reflect.Float64:
		return "a valid number"
	case reflect.String:
		return "a valid string"
	case reflect.Slice, reflect.Array:
		return "a valid list"
	case reflect.Struct, reflect.Map:
		return "a valid object"
	default:
		return "a valid value"
	}
}

func checkModel(model string, lim limitsForDecode) *apiError {
	if model != "" && model != lim.model {
		return notFound(fmt.Sprintf("The model `%s` does not exist.", model))
	}
	return nil
}

// commonChecks validates what chat and completions share.
func commonChecks(j *job, so *streamOptions, n *int, _ string) *apiError {
	if n != nil && *n != 1 {
		return badRequest("n", fmt.Sprintf("n: only n=1 is supported, got %d", *n))
	}
	if so != nil {
		if !j.stream {
			return badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		j.includeUsage = so.IncludeUsage
	}
	return nil
}

// resolve applies max_tokens, min_tokens, ignore_eos and max_model_len and
// decides the output length. defaultMax < 0 means "the rest of the
// context", vLLM's chat default.
//
// The EOS model: the answer has L tokens, L drawn from [answerMin,
// answerMax] by a hash of (server seed, request seed, prompt); its L-th
// token is the last (the EOS itself is neither shown nor counted). With
// ignore_eos, L is ignored; min_tokens raises L; the request ends with
// "stop" after L tokens when L ≤ max_tokens, else with "length" after
// max_tokens.
func resolve(
	j *job,
	lim limitsForDecode,
	maxTok *int,
	defaultMax, minTok int,
	ignoreEOS bool,
	reqSeed *int64,
	fingerprint uint64,
) *apiError {
	if maxTok != nil && *maxTok <= 0 {
		return badRequest("max_tokens", fmt.Sprintf("max_tokens must be at least 1, got %d.", *maxTok))
	}
	if minTok < 0 {
		return badRequest("min_tokens", fmt.Sprintf("min_tokens must be greater than or equal to 0, got %d.", minTok))
	}
	what := "messages"
	if j.api != apiChat {
		what = "prompt"
	}
	ml := lim.maxModelLen
	if ml > 0 && j.promptTokens >= ml {
		return badRequest(what, fmt.Sprintf("This model's maximum context length is %d tokens. "+
			"However, your request has %d input tokens. Please reduce the length of the input %s.",
			ml, j.promptTokens, what))
	}
	if maxTok != nil {
		j.maxTokens = *maxTok
		if ml > 0 && j.promptTokens+j.maxTokens > ml {
			return badRequest(what, fmt.Sprintf("This model's maximum context length is %d tokens. "+
				"However, you requested %d tokens (%d in the %s, %d in the completion). "+
				"Please reduce the length of the %s or completion.",
				ml, j.promptTokens+j.maxTokens, j.promptTokens, what, j.maxTokens, what))
		}
	} else {
		switch {
		case defaultMax > 0:
			j.maxTokens = defaultMax
			if ml > 0 {
				j.maxTokens = min(defaultMax, ml-j.promptTokens)
			}
		case ml > 0:
			j.maxTokens = ml - j.promptTokens
		default:
			j.maxTokens = unboundedMaxTokens
		}
	}
	if minTok > j.maxTokens {
		return badRequest("min_tokens", fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.",
			j.maxTokens, minTok))
	}
	var rs uint64
	if reqSeed != nil {
		rs = uint64(*reqSeed)
	}
	key := mix64(mix64(uint64(lim.seed)^0x243f6a8885a308d3, rs), fingerprint)
	j.textSeed = int64(key)
	answer := lim.answerMin
	if span := lim.answerMax - lim.answerMin; span > 0 {
		answer += int(mix64(key, 1) % uint64(span+1))
	}
	answer = max(answer, minTok, 1)
	switch {
	case ignoreEOS || answer > j.maxTokens:
		j.outTokens, j.finish = j.maxTokens, finishLength
	default:
		j.outTokens, j.finish = answer, finishStop
	}
	return nil
}

// countContent counts a chat message's content: a string, an array of
// parts (text parts count; others cost nothing), or null.
func countContent(raw json.RawMessage, h *fingerprint, i int) (int, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, badRequest("messages", fmt.Sprintf("messages[%d].content: %s", i, jsonProblem(err)))
		}
		h.add(s)
		return tokens.Count(s), nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return 0, badRequest("messages", fmt.Sprintf(
				"messages[%d].content: expected a string or an array of parts: %s", i, jsonProblem(err)))
		}
		n := 0
		for _, p := range parts {
			if p.Type == "text" {
				h.add(p.Text)
				n += tokens.Count(p.Text)
			}
		}
		return n, nil
	}
	return 0, badRequest("messages", fmt.Sprintf("messages[%d].content: expected a string or an array of parts", i))
}

// countPrompt counts a completions prompt: a string, a list of one string,
// a token-id list, or a list of one token-id list. Batched prompts (more
// than one) are refused like n>1.
func countPrompt(raw json.RawMessage, h *fingerprint) (int, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, badRequest("prompt", "prompt: is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, badRequest("prompt", fmt.Sprintf("prompt: %s", jsonProblem(err)))
		}
		h.add(s)
		return tokens.Count(s), nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, badRequest("prompt", "prompt: expected a string, a list of strings or a list of token ids")
	}
	if len(list) == 0 {
		return 0, badRequest("prompt", "prompt: must not be empty")
	}
	first := bytes.TrimSpace(list[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		if len(list) != 1 {
			return 0, badRequest("prompt", fmt.Sprintf("prompt: batched prompts are not supported, got %d", len(list)))
		}
		return countPrompt(first, h)
	case len(first) > 0 && first[0] == '[':
		if len(list) != 1 {
			return 0, badRequest("prompt", fmt.Sprintf("prompt: batched prompts are not supported, got %d", len(list)))
		}
		return countIDs(first, h)
	}
	return countIDs(raw, h)
}

func countIDs(raw json.RawMessage, h *fingerprint) (int, *apiError) {
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		return 0, badRequest("prompt", "prompt: expected a list of integer token ids")
	}
	if len(ids) == 0 {
		return 0, badRequest("prompt", "prompt: must not be empty")
	}
	for i, id := range ids {
		if id < 0 {
			return 0, badRequest("prompt", fmt.Sprintf("prompt[%d]: token id must be >= 0, got %d", i, id))
		}
		h.addInt(id)
	}
	return len(ids), nil
}

// fingerprint is FNV-1a over a prompt's content, to seed the answer.
type fingerprint uint64

func newFingerprint() fingerprint { return 14695981039346656037 }

func (f *fingerprint) add(s string) {
	x := uint64(*f)
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 1099511628211
	}
	x ^= 0xff // separates parts: ["ab","c"] differs from ["a","bc"]
	x *= 1099511628211
	*f = fingerprint(x)
}

func (f *fingerprint) addInt(v int) {
	*f = fingerprint(mix64(uint64(*f), uint64(v)))
}

func (f fingerprint) sum() uint64 { return uint64(f) }

// mix64 is splitmix64 of a combined with b.
func mix64(a, b uint64) uint64 {
	z := a + (b+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
