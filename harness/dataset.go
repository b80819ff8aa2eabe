package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// Request is one prepared request: its body is built before its send time,
// so the pacer's hot path only writes bytes.
type Request struct {
	Index        int    // position in the step, from 0; the first Warmup are warm-up
	InputTokens  int    // planned prompt tokens (the prompt text alone, before any chat template)
	OutputTokens int    // max_tokens asked for
	Body         []byte // JSON request body
}

// Prompt is one entry of a prompt file.
type Prompt struct {
	Text         string
	OutputTokens int // from the file, 0 when it has none
}

// LoadPrompts reads a prompt file: "jsonl" (one object per line with
// "prompt" or "text", optionally "output_tokens" or "max_tokens") or
// "sharegpt" (a JSON array of {"conversations":[{"from","value"}...]},
// whose first human turn is the prompt and the reply's length, counted with
// the mock's tokenizer, the output length).
func LoadPrompts(path, format string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset.prompts: %w", err)
	}
	defer f.Close()
	var out []Prompt
	switch format {
	case "jsonl":
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for line := 1; sc.Scan(); line++ {
			b := sc.Bytes()
			if len(strings.TrimSpace(string(b))) == 0 {
				continue
			}
			var e struct {
				Prompt       string `json:"prompt"`
				Text         string `json:"text"`
				OutputTokens int    `json:"output_tokens"`
				MaxTokens    int    `json:"max_tokens"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				return nil, fmt.Errorf("dataset.prompts: %s:%d: %w", path, line, err)
			}
			p := Prompt{Text: e.Prompt, OutputTokens: max(e.OutputTokens, e.MaxTokens)}
			if p.Text == "" {
				p.Text = e.Text
			}
			if p.Text == "" {
				return nil, fmt.Errorf("dataset.prompts: %s:%d: no \"prompt\" or \"text\"", path, line)
			}
			out = append(out, p)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("dataset.prompts: %s: %w", path, err)
		}
	case "sharegpt":
		var convs []struct {
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
		}
		if err := json.NewDecoder(f).Decode(&convs); err != nil {
			return nil, fmt.Errorf("dataset.prompts: %s: %w", path, err)
		}
		for _, c := range convs {
			for i, turn := range c.Conversations {
				if turn.From != "human" && turn.From != "user" || turn.Value == "" {
					continue
				}
				p := Prompt{Text: turn.Value}
				if i+1 < len(c.Conversations) {
					p.OutputTokens = tokens.Count(c.Conversations[i+1].Value)
				}
				out = append(out, p)
				break
			}
		}
	default:
		return nil, fmt.Errorf("dataset.prompt_format: %q is not jsonl or sharegpt", format)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dataset.prompts: %s holds no prompts", path)
	}
	return out, nil
}

// source makes a step's requests, the same ones for the same seed.
type source struct {
	mu      sync.Mutex
	r       *rand.Rand
	step    Step
	prompts []Prompt
	stream  bool
	ignEOS  bool
	next    int
	owns    func(int) bool // the shard's requests; nil: all
}

func newSource(step Step, prompts []Prompt, ignoreEOS bool) *source {
	return &source{
		r:       rand.New(rand.NewPCG(step.Seed, 0xda7a5e7)),
		step:    step,
		prompts: prompts,
		stream:  step.Stream,
		ignEOS:  ignoreEOS,
	}
}

// Next builds the next request. Safe for concurrent use. A shard's source
// draws every request of the step in order, so each keeps the prompt and
// lengths it has in a single process, and builds only its own.
func (s *source) Next() (*Request, error) {
	s.mu.Lock()
	i, text, in, out, promptSeed := s.draw()
	for s.owns != nil && !s.owns(i) {
		i, text, in, out, promptSeed = s.draw()
	}
	s.mu.Unlock()
	if text == "" {
		text = tokens.Prompt(in, promptSeed)
	}
	body, err := requestBody(s.step.Target, text, out, s.stream, s.ignEOS)
	if err != nil {
		return nil, err
	}
	return &Request{Index: i, InputTokens: in, OutputTokens: out, Body: body}, nil
}

// draw takes the next request's index, prompt (from the file), lengths
// and prompt seed from the step's sequence. s.mu must be held.
func (s *source) draw() (i int, text string, in, out int, promptSeed int64) {
	i = s.next
	s.next++
	if len(s.prompts) > 0 {
		p := s.prompts[s.r.IntN(len(s.prompts))]
		text, out = p.Text, p.OutputTokens
		in = tokens.Count(text)
	} else {
		in = s.step.InputTokens.Sample(s.r)
	}
	if !s.step.OutputTokens.IsZero() {
		out = s.step.OutputTokens.Sample(s.r)
	}
	if out <= 0 {
		out = 128
	}
	promptSeed = int64(s.r.Uint64() >> 1)
	return i, text, in, out, promptSeed
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type openAIBody struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages,omitempty"`
	Prompt        string         `json:"prompt,omitempty"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	IgnoreEOS     bool           `json:"ignore_eos,omitempty"`
}

type tgiBody struct {
	Inputs     string `json:"inputs"`
	Parameters struct {
		MaxNewTokens int  `json:"max_new_tokens"`
		Details      bool `json:"details"`
	} `json:"parameters"`
}

// requestBody encodes the request for the target's API. Streams ask for
// usage in the last chunk, so N_in and N_out come from the server.
func requestBody(t Target, prompt string, maxTokens int, stream, ignoreEOS bool) ([]byte, error) {
	switch t.API {
	case APITGI:
		var b tgiBody
		b.Inputs = prompt
		b.Parameters.MaxNewTokens = maxTokens
		b.Parameters.Details = true
		return json.Marshal(b)
	case APIChat, APICompletions:
		b := openAIBody{Model: t.Model, MaxTokens: maxTokens, Stream: stream, IgnoreEOS: ignoreEOS}
		if stream {
			b.StreamOptions = &streamOptions{IncludeUsage: true}
		}
		if t.API == APIChat {
			b.Messages = []chatMessage{{Role: "user", Content: prompt}}
		} else {
			b.Prompt = prompt
		}
		return json.Marshal(b)
	}
	return nil, fmt.Errorf("target %q: unknown api %q", t.Name, t.API)
}
