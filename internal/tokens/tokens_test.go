package tokens

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},                         // empty text has no tokens
		{"   \t\n", 0},                  // whitespace only
		{"hello", 1},                    // one word
		{"hello,  world\n", 2},          // punctuation sticks to its word; runs of spaces count once
		{" lead and trail ", 3},         // leading and trailing space ignored
		{"a\u00a0b", 2},                 // non-breaking space is whitespace (unicode.IsSpace)
		{"naïve café", 2},               // multi-byte letters are not separators
		{"x\u2003y\u3000z", 3},          // em space and ideographic space separate
		{"\xff\xfe bad", 2},             // invalid UTF-8 bytes form a token, like strings.Fields
		{"line1\r\nline2\vline3\f4", 4}, // every ASCII space class separates
	}
	for _, tc := range tests {
		if got := Count(tc.in); got != tc.want {
			t.Errorf("Count(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestPromptExactLength(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 2, 7, 100, 2048, 32768} {
		p := Prompt(n, 42)
		if got := Count(p); got != n {
			t.Errorf("Count(Prompt(%d)) = %d", n, got)
		}
		if p != Prompt(n, 42) {
			t.Errorf("Prompt(%d, 42) not deterministic", n)
		}
	}
	if Prompt(50, 1) == Prompt(50, 2) {
		t.Error("different seeds gave the same prompt")
	}
	if Prompt(-3, 1) != "" {
		t.Error("negative n must give the empty prompt")
	}
}

func TestTextMatchesAppendToken(t *testing.T) {
	t.Parallel()
	const seed = 7
	text := Text(seed, 20)
	fields := strings.Fields(text)
	if len(fields) != 20 {
		t.Fatalf("Text has %d words, want 20", len(fields))
	}
	var b []byte
	for i := 0; i < 20; i++ {
		b = AppendToken(b, seed, i)
		if w := Word(ID(seed, i)); w != fields[i] {
			t.Errorf("token %d: Word(ID) = %q, text has %q", i, w, fields[i])
		}
	}
	if string(b) != text {
		t.Errorf("AppendToken concatenation %q != Text %q", b, text)
	}
	if !strings.HasPrefix(text, fields[0]) || strings.HasSuffix(text, " ") {
		t.Errorf("text %q must start with a word and not end in a space", text)
	}
}

func TestVocabulary(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for id := FirstID; id < FirstID+VocabSize; id++ {
		w := Word(id)
		if w == "" || Count(w) != 1 || seen[w] {
			t.Fatalf("Word(%d) = %q: empty, not one token, or duplicate", id, w)
		}
		for _, c := range w {
			if c < 'a' || c > 'z' {
				t.Fatalf("Word(%d) = %q has a character needing escaping", id, w)
			}
		}
		seen[w] = true
	}
	if Word(FirstID-1) != "" || Word(FirstID+VocabSize) != "" {
		t.Error("ids outside the vocabulary must have no word")
	}
}

func TestAppendTokenDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		buf = AppendToken(buf[:0], 3, 17)
	})
	if allocs != 0 {
		t.Errorf("AppendToken allocates %.1f times per call", allocs)
	}
}

func TestChatOverhead(t *testing.T) {
	t.Parallel()
	if ChatOverhead(1) != ChatTemplateOverhead {
		t.Errorf("ChatOverhead(1) = %d, ChatTemplateOverhead = %d", ChatOverhead(1), ChatTemplateOverhead)
	}
	if ChatOverhead(3)-ChatOverhead(2) != ChatMessageOverhead {
		t.Error("each extra message must cost ChatMessageOverhead")
	}
}

func FuzzCount(f *testing.F) {
	f.Add(uint16(5), int64(1), "some text\there")
	f.Add(uint16(0), int64(-9), "")
	f.Add(uint16(300), int64(1<<40), "\u00a0x\xff")
	f.Fuzz(func(t *testing.T, n uint16, seed int64, s string) {
		if got := Count(s); got != len(strings.Fields(s)) {
			t.Fatalf("Count(%q) = %d, strings.Fields gives %d", s, got, len(strings.Fields(s)))
		}
		p := Prompt(int(n), seed)
		if got := Count(p); got != int(n) {
			t.Fatalf("Count(Prompt(%d, %d)) = %d", n, seed, got)
		}
		// Joining with whitespace adds counts; this is what lets a client
		// build a prompt from parts.
		if got, want := Count(p+" "+s), int(n)+Count(s); got != want {
			t.Fatalf("Count(prompt + %q) = %d, want %d", s, got, want)
		}
		if got := Count(Text(seed, int(n))); got != int(n) {
			t.Fatalf("Count(Text(%d, %d)) = %d", seed, n, got)
		}
	})
}

func ExamplePrompt() {
	p := Prompt(5, 42)
	fmt.Println(Count(p), Count(p)+ChatTemplateOverhead)
	// Output: 5 15
}

func BenchmarkCount(b *testing.B) {
	s := Prompt(2048, 1)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		Count(s)
	}
}

// FuzzCountQuoted holds the harness's in-place count of a JSON-quoted chunk
// to the tokenizer's own count of the decoded text: one rule, two readers.
func FuzzCountQuoted(f *testing.F) {
	for _, s := range []string{"", " ", "hello", "a b", "a\nb\tc", "x\u00a0y", "\u2028z", `q"uote\`, "é à"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip("JSON encoding replaces invalid UTF-8")
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		n, nonEmpty := CountQuoted(b)
		if want := Count(s); n != want {
			t.Errorf("CountQuoted(%s) = %d, Count = %d", b, n, want)
		}
		if nonEmpty != (s != "") {
			t.Errorf("CountQuoted(%s) nonEmpty = %v", b, nonEmpty)
		}
	})
}
