package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxLine bounds one JSON line; a records line with thousands of chunk
// gaps stays far below it.
const maxLine = 64 << 20

// ErrTornLine marks a last line that ended before its JSON did: the file of
// a run that was killed while writing. The lines before it are returned.
var ErrTornLine = errors.New("last line is incomplete")

// ReadLines reads a JSON-lines file of T. A line that does not parse is an
// error naming the file and the line, returned with every value read
// before it: results are never skipped silently.
func ReadLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := DecodeLines[T](f)
	if err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// DecodeLines reads JSON lines of T from r until EOF. Blank lines are
// skipped. A torn last line is reported as ErrTornLine.
func DecodeLines[T any](r io.Reader) ([]T, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var out []T
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) > maxLine {
			return out, fmt.Errorf("line %d is longer than %d bytes", line, maxLine)
		}
		if !blank(b) {
			var v T
			if jerr := json.Unmarshal(b, &v); jerr != nil {
				if errors.Is(err, io.EOF) {
					return out, fmt.Errorf("line %d (%d read before it): %w: %w", line, len(out), ErrTornLine, jerr)
				}
				return out, fmt.Errorf("line %d: %w", line, jerr)
			}
			out = append(out, v)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// LineWriter writes values as JSON lines through one buffer. It is not safe
// for concurrent use: one goroutine owns it.
type LineWriter[T any] struct {
	bw  *bufio.Writer
	enc *json.Encoder
	n   int64
}

// NewLineWriter buffers lines for w; the caller must Flush.
func NewLineWriter[T any](w io.Writer) *LineWriter[T] {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &LineWriter[T]{bw: bw, enc: enc}
}

// Write appends one line (json.Encoder ends each value with '\n').
func (w *LineWriter[T]) Write(v *T) error {
	w.n++
	return w.enc.Encode(v)
}

// Lines is the number of lines written.
func (w *LineWriter[T]) Lines() int64 { return w.n }

// Flush pushes buffered lines to the underlying writer.
func (w *LineWriter[T]) Flush() error { return w.bw.Flush() }

// WriteJSON writes v to path as indented JSON.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON decodes the JSON document at path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
