package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/llm-testbed/testbed/internal/tokens"
)

// Probe lengths for measuring a server's tokenizer, in mock tokens (words). Two
// lengths give both the server's tokens per word and its fixed template
// overhead.
const (
	probeShort = 256
	probeLong  = 2048
)

// sizeLongContext makes long-context buckets exact for a real server's
// tokenizer. Synthetic prompts are exact for the mock's tokenizer (one
// token per word); a real server counts differently. When the plan asks
// for it (scenarios.long_context.measure_tokenizer), two non-streaming probes of
// known word counts to the first target give prompt_tokens = overhead +
// scale × words, and each bucket's prompt is then sized so the server
// counts the bucket's tokens. Scale and overhead are written into the
// plan, hence into run.json; every target gets the same text, so
// comparisons stay on identical requests. Without the flag it does nothing.
func sizeLongContext(ctx context.Context, p *Plan) error {
	if p.Scenarios == nil || p.Scenarios.LongContext == nil || !p.Scenarios.LongContext.MeasureTokenizer {
		return nil
	}
	lc := p.Scenarios.LongContext
	t := p.Targets[0]
	if t.API == APITGI {
		return fmt.Errorf(
			"scenarios.long_context.measure_tokenizer: target %q uses the TGI API, which reports no prompt token count; set "+
				"scale and overhead by hand",
			t.Name,
		)
	}
	c, err := newClient(p, t, "new", time.Now(), 1)
	if err != nil {
		return err
	}
	defer c.tr.CloseIdleConnections()
	var counts [2]int
	for i, words := range []int{probeShort, probeLong} {
		if counts[i], err = c.promptTokens(ctx, tokens.Prompt(words, p.Seed+int64(i))); err != nil {
			return fmt.Errorf("scenarios.long_context.measure_tokenizer: target %q: %w", t.Name, err)
		}
	}
	scale := float64(counts[1]-counts[0]) / float64(probeLong-probeShort)
	if !(scale > 0) {
		return fmt.Errorf(
			"scenarios.long_context.measure_tokenizer: target %q reported %d then %d prompt tokens for %d and %d words: no "+
				"usable scale",
			t.Name,
			counts[0],
			counts[1],
			probeShort,
			probeLong,
		)
	}
	lc.Scale = scale
	lc.Overhead = float64(counts[0]) - scale*probeShort
	return nil
}

// promptTokens sends prompt once, non-streaming, for one output token, and
// returns the server's usage.prompt_tokens.
func (c *client) promptTokens(ctx context.Context, prompt string) (int, error) {
	body, err := requestBody(c.target, prompt, 1, false, false)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url[0], bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = c.header[0].Clone()
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("probe answered %s: %s", resp.Status, truncate(string(b), 300))
	}
	var u struct {
		Usage *usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &u); err != nil || u.Usage == nil || u.Usage.PromptTokens <= 0 {
		return 0, fmt.Errorf("probe response has no usage.prompt_tokens: %s", truncate(string(b), 300))
	}
	return u.Usage.PromptTokens, nil
}

// bucketWords is how many words (mock tokens) of prompt make a bucket of
// the given server tokens, once calibrated; the bucket itself otherwise.
func (lc *LongContextScenario) bucketWords(bucket int) int {
	if lc.Scale <= 0 {
		return bucket
	}
	return max(1, int(math.Round((float64(bucket)-lc.Overhead)/lc.Scale)))
}
