// Package tokens is the testbed's shared word tokenizer: one token per
// whitespace-separated word. The mock counts and generates with it, and the
// harness builds prompts of an exact token length and counts the words a
// streamed chunk carries with it, so both sides agree on every usage figure.
// It is deterministic, documented and cheap.
//
// The rule: a token is a maximal run of non-whitespace characters, where
// whitespace is what unicode.IsSpace says (the same split as strings.Fields).
// "hello,  world\n" is 2 tokens; "" and "   " are 0.
//
// Generated text is a pseudo-language of two-syllable ASCII words drawn from a
// fixed vocabulary of VocabSize words, chosen by a seeded hash of the token's
// position. Token i of a seed is always the same word, whatever came before,
// so the server can produce any token without state and without allocating.
// Generated tokens are joined by a single space (token 0 has no leading space,
// every later token has one), so Count of the concatenated text equals the
// number of tokens generated.
//
// Chat requests pay a fixed template overhead, modelled on the Llama 3 chat
// template: ChatPrimingOverhead once per request (begin-of-text plus the
// assistant header that primes the reply) and ChatMessageOverhead per message
// (role header and end-of-turn markers). A chat request with one user message
// whose content is Prompt(n, seed) therefore has n + ChatTemplateOverhead
// prompt tokens.
package tokens

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// ChatPrimingOverhead is charged once per chat request: begin-of-text
	// plus the assistant header that primes the reply.
	ChatPrimingOverhead = 5
	// ChatMessageOverhead is charged per chat message: role header,
	// separators and end-of-turn marker.
	ChatMessageOverhead = 5
	// ChatTemplateOverhead is the overhead of a chat request with exactly one
	// message: prompt_tokens = Count(content) + ChatTemplateOverhead.
	ChatTemplateOverhead = ChatPrimingOverhead + ChatMessageOverhead

	// VocabSize is the number of distinct generated words.
	VocabSize = 4096
	// FirstID is the token id of vocabulary word 0; ids below it are
	// reserved for special tokens (EOSID).
	FirstID = 1000
	// EOSID is the id reported for the end-of-sequence token.
	EOSID = 2
)

// ChatOverhead is the template overhead of a chat request with the given
// number of messages.
func ChatOverhead(messages int) int {
	return ChatPrimingOverhead + messages*ChatMessageOverhead
}

// Count returns the number of tokens in s: its whitespace-separated fields.
// It does not allocate.
func Count(s string) int {
	n := 0
	inWord := false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if space {
			inWord = false
		} else if !inWord {
			inWord = true
			n++
		}
	}
	return n
}

var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// Prompt returns text of exactly n tokens (words separated by single spaces),
// the same for the same (n, seed). n <= 0 gives "".
func Prompt(n int, seed int64) string {
	// A prompt is generated text of another stream, so prompts and answers
	// of the same seed differ.
	return Text(seed^promptSalt, n)
}

const promptSalt = 0x5bd1e9955bd1e995

// Text returns the first n generated tokens of seed, joined as the server
// streams them. Count(Text(seed, n)) == n.
func Text(seed int64, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(n * 6)
	buf := make([]byte, 0, 8)
	for i := 0; i < n; i++ {
		buf = AppendToken(buf[:0], seed, i)
		b.Write(buf)
	}
	return b.String()
}

// ID returns the token id of generated token i of seed, in
// [FirstID, FirstID+VocabSize).
func ID(seed int64, i int) int {
	return FirstID + int(mix(uint64(seed), uint64(i))%VocabSize)
}

// Word returns the vocabulary word of a token id (without separator), or ""
// when id is not a vocabulary id.
func Word(id int) string {
	w := id - FirstID
	if w < 0 || w >= VocabSize {
		return ""
	}
	return words[w]
}

// AppendToken appends the text of generated token i of seed to dst: the word,
// preceded by a single space when i > 0. The text is plain ASCII letters, so
// it needs no escaping in JSON. It does not allocate when dst has room.
func AppendToken(dst []byte, seed int64, i int) []byte {
	if i > 0 {
		dst = append(dst, ' ')
	}
	return append(dst, words[ID(seed, i)-FirstID]...)
}

// mix is splitmix64 over the seed and the position: a fast, well-spread hash
// so neighbouring positions get unrelated words.
func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// words is the vocabulary: every pair of 64 consonant-vowel syllables.
var words = func() []string {
	const consonants = "bdfghjklmnprstvz"
	const vowels = "aeio"
	syl := make([]string, 0, 64)
	for _, c := range consonants {
		for _, v := range vowels {
			syl = append(syl, string(c)+string(v))
		}
	}
	ws := make([]string, VocabSize)
	for i := range ws {
		ws[i] = syl[i/64] + syl[i%64]
	}
	return ws
}()

// CountQuoted counts the tokens of the JSON string literal at the start of
// v (v[0] must be '"') without decoding it, by the same rule as Count:
// escaped whitespace (\n, \t, \r, \f, \u0020, \u00a0, ...) separates words
// like the character it stands for. It returns the count and whether the
// literal was non-empty; it stops at the closing quote or the end of v.
// The harness uses it to count the words of a streamed chunk in place.
func CountQuoted(v []byte) (n int, nonEmpty bool) {
	if len(v) < 2 || v[0] != '"' || v[1] == '"' {
		return 0, false
	}
	inWord := false
	for i := 1; i < len(v); {
		c := v[i]
		var space bool
		switch {
		case c == '"':
			return n, true
		case c == '\\':
			space, i = escapedSpace(v, i)
		case c < utf8.RuneSelf:
			space = asciiSpace[c]
			i++
		default:
			r, size := utf8.DecodeRune(v[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if space {
			inWord = false
		} else if !inWord {
			inWord = true
			n++
		}
	}
	return n, true
}

// escapedSpace reads the escape sequence at v[i] (a backslash) and reports
// whether it stands for whitespace, and the index after it.
func escapedSpace(v []byte, i int) (space bool, next int) {
	if i+1 >= len(v) {
		return false, len(v)
	}
	switch v[i+1] {
	case 'n', 't', 'r', 'f':
		return true, i + 2
	case 'u':
		if i+6 > len(v) {
			return false, len(v)
		}
		r, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 32)
		return err == nil && unicode.IsSpace(rune(r)), i + 6
	}
	return false, i + 2
}
