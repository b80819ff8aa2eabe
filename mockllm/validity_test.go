package mockllm

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A fitted profile's validity range: every request outside it is counted
// by dimension and direction, and the first of each kind is warned about
// in one line; requests inside it say nothing.
func TestValidityWarnings(t *testing.T) {
	t.Parallel()
	p, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	p.TTFT = 2 * time.Millisecond
	p.ITL = 5 * time.Millisecond
	p.Validity = engine.Validity{MinInFlight: 1, MaxInFlight: 2, MinPromptTokens: 20, MaxPromptTokens: 100}
	var warn syncBuffer
	s, err := New(WithProfile(p), WithModel("m"), WithSeed(1), WithWarnings(&warn))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	chat := func(words, maxTokens int) string {
		return fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
			maxTokens, strings.Repeat("word ", words))
	}
	send := func(body string) {
		if resp, b := do(t, ts, http.MethodPost, "/v1/chat/completions", body); resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, b)
		}
	}
	send(chat(50, 2)) // inside: no warning
	if w := warn.String(); w != "" {
		t.Fatalf("warned inside the range: %q", w)
	}
	send(chat(300, 2)) // prompt above, twice: one warning, two counts
	send(chat(300, 2))
	send(chat(1, 2)) // prompt below
	var wg sync.WaitGroup
	for range 4 { // four at once: above the two in flight fitted on
		wg.Go(func() { send(chat(50, 40)) })
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(warn.String()), "\n")
	for _, want := range []string{"prompt tokens, above the 20–100", "prompt tokens, below the 20–100",
		"requests in flight, above the 1–2"} {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d warnings with %q, want 1:\n%s", n, want, warn.String())
		}
	}
	_, metrics := do(t, ts, http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`testbed_mock_outside_validity_total{dimension="prompt_tokens",direction="above"} 2`,
		`testbed_mock_outside_validity_total{dimension="prompt_tokens",direction="below"} 1`,
		`testbed_mock_outside_validity_total{dimension="in_flight",direction="above"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
