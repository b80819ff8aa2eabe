package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t testing.TB, r *Reader) ([]string, error) {
	var out []string
	for {
		d, err := r.Next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestReader(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		// vLLM / OpenAI framing: "data: " with a space, blank line between events.
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		// TGI writes "data:" without the space.
		{"tgi", "data:{\"token\":{}}\n\n", []string{`{"token":{}}`}},
		// CRLF line endings, as some proxies rewrite them.
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		// Comment lines (keep-alives) are skipped, also between data lines.
		{"comments", ": ping\n\ndata: a\n: mid\ndata: b\n\n", []string{"a\nb"}},
		// Several data lines make one event joined by newlines.
		{"multiline", "data: one\ndata: two\ndata:three\n\n", []string{"one\ntwo\nthree"}},
		// Only one leading space is removed from a value.
		{"two spaces", "data:  x\n\n", []string{" x"}},
		// Events with no data field (event:, id:, retry:) are skipped.
		{"no data", "event: ping\nid: 4\nretry: 10\n\ndata: a\n\n", []string{"a"}},
		// An empty data field still makes an event with empty data.
		{"empty data", "data:\n\n", []string{""}},
		// A line longer than the 4 KiB read buffer arrives whole.
		{"long line", "data: " + long + "\n\n", []string{long}},
		// A stream closed without the final blank line loses nothing.
		{"unterminated", "data: a\n\ndata: [DONE]", []string{"a", "[DONE]"}},
		// A last line ending in CR only, then EOF.
		{"trailing cr", "data: a\r", []string{"a"}},
		// Many blank lines between events change nothing.
		{"blank lines", "\n\n\ndata: a\n\n\n\n", []string{"a"}},
		// A line without a colon is a field with an empty value; "data" alone is an empty data line.
		{"bare field", "data\ndata: x\n\n", []string{"\nx"}},
		// Empty stream.
		{"empty", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, rd := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readAll(t, NewReader(rd))
				if err != nil {
					t.Fatalf("error: %v", err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %d events %q, want %q", len(got), got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("event %d = %.60q, want %.60q", i, got[i], tc.want[i])
					}
				}
			}
		})
	}
}

func TestReaderEventField(t *testing.T) {
	t.Parallel()
	r := NewReader(strings.NewReader("event: error\ndata: boom\n\ndata: ok\n\n"))
	d, err := r.Next()
	if err != nil || string(d) != "boom" || string(r.Event()) != "error" {
		t.Fatalf("first event = %q, %q, %v; want boom, error", d, r.Event(), err)
	}
	d, err = r.Next()
	if err != nil || string(d) != "ok" || len(r.Event()) != 0 {
		t.Fatalf("second event = %q, %q, %v; want ok with no event name", d, r.Event(), err)
	}
}

func TestReaderLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		// One line over the limit.
		{"line", "data: " + strings.Repeat("y", 300) + "\n\n"},
		// Many short data lines that together exceed the limit.
		{"event", strings.Repeat("data: 0123456789\n", 40) + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := readAll(t, NewReader(strings.NewReader(tc.in), WithMaxLine(256), WithBufferSize(64)))
			if !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("err = %v, want ErrLineTooLong", err)
			}
		})
	}
}

func TestReaderReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if d, err := r.Next(); err != nil || string(d) != "a" {
		t.Fatalf("first = %q, %v", d, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the read error", err)
	}
}

func TestReaderReset(t *testing.T) {
	t.Parallel()
	r := NewReader(strings.NewReader("data: a\n\n"))
	if _, err := readAll(t, r); err != nil {
		t.Fatal(err)
	}
	r.Reset(strings.NewReader("data: b\n\n"))
	got, err := readAll(t, r)
	if err != nil || len(got) != 1 || got[0] != "b" {
		t.Fatalf("after Reset got %q, %v", got, err)
	}
}

// FuzzReader checks the reader never panics and agrees with a simple
// line-by-line reference implementation of the SSE rules it supports.
func FuzzReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data:x\r\n\r\n: c\ndata: y\ndata: z\n\n"))
	f.Add([]byte("event: e\ndata\n\ndata:  \n"))
	f.Add([]byte("\r\r\n\ndata: a\r"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readAll(t, NewReader(bytes.NewReader(in), WithBufferSize(16)))
		if err != nil {
			t.Fatalf("error on in-memory input: %v", err)
		}
		want := reference(in)
		if len(got) != len(want) {
			t.Fatalf("got %q, reference %q", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("event %d: got %q, reference %q", i, got[i], want[i])
			}
		}
	})
}

// reference is the obvious, slow implementation used to check Reader.
func reference(in []byte) []string {
	s := string(in)
	lines := strings.Split(s, "\n")
	var out []string
	var data []string
	has := false
	for i, l := range lines {
		last := i == len(lines)-1
		if last && l == "" {
			break
		}
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			if has {
				out = append(out, strings.Join(data, "\n"))
			}
			data, has = nil, false
			continue
		}
		if strings.HasPrefix(l, ":") {
			continue
		}
		name, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		if name == "data" {
			data = append(data, value)
			has = true
		}
	}
	if has {
		out = append(out, strings.Join(data, "\n"))
	}
	return out
}

func BenchmarkReader(b *testing.B) {
	chunk := "data: " +
		"{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" " +
		"tok\"},\"finish_reason\":null}]}\n\n"
	in := []byte(strings.Repeat(chunk, 64))
	rd := bytes.NewReader(in)
	r := NewReader(rd)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(in)
		r.Reset(rd)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}
