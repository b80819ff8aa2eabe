// Package sse reads Server-Sent Events streams as LLM servers write them:
// OpenAI and vLLM (`data: {json}`), TGI (`data:{json}`, no space), comment
// lines, CRLF line endings, events spread over several `data` lines, and
// lines far longer than the read buffer.
//
// The reader works on bytes and allocates only when an event outgrows its
// buffers, because a load client reads thousands of streams at once and
// each chunk passes through here.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine bounds one line (and one event) so a broken server cannot
// make the client buffer without limit.
const DefaultMaxLine = 16 << 20

// ErrLineTooLong is returned when a line or an event exceeds the reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader yields the data of each event in a stream. Its zero value is not
// usable; call NewReader.
type Reader struct {
	br      *bufio.Reader
	long    []byte // a line that did not fit in br's buffer
	data    []byte // data lines of the event being read, joined by '\n'
	event   []byte // the event's `event:` field, if any
	hasData bool
	maxLine int
	bufSize int
	done    bool
}

// Option configures a Reader.
type Option func(*Reader)

// WithMaxLine sets the longest line or event the Reader accepts
// (DefaultMaxLine when n <= 0).
func WithMaxLine(n int) Option {
	return func(r *Reader) {
		if n > 0 {
			r.maxLine = n
		}
	}
}

// WithBufferSize sets the size of the read buffer (4 KiB by default). Lines
// longer than the buffer still work; they cost an extra copy.
func WithBufferSize(n int) Option {
	return func(r *Reader) {
		if n >= 16 {
			r.bufSize = n
		}
	}
}

// NewReader returns a Reader reading events from r.
func NewReader(r io.Reader, opts ...Option) *Reader {
	rd := &Reader{maxLine: DefaultMaxLine, bufSize: 4096}
	for _, o := range opts {
		o(rd)
	}
	rd.br = bufio.NewReaderSize(r, rd.bufSize)
	return rd
}

// Reset makes the Reader read a new stream from r, keeping its buffers, so
// a pool of Readers serves many requests without allocating.
func (r *Reader) Reset(src io.Reader) {
	r.br.Reset(src)
	r.long = r.long[:0]
	r.data = r.data[:0]
	r.event = r.event[:0]
	r.hasData = false
	r.done = false
}

// Event returns the `event:` field of the event last returned by Next
// (empty when the event had none). It is valid until the next call to Next.
func (r *Reader) Event() []byte { return r.event }

// Next returns the data of the next event: its `data` lines joined by '\n'.
// Events without a data line are skipped, as the SSE standard says. The
// slice is valid only until the next call. At the end of the stream Next
// returns io.EOF; an event left unterminated by the end of the stream is
// still returned first, since servers that close right after their last
// line lose nothing that way. Other read errors are returned as they are.
func (r *Reader) Next() ([]byte, error) {
	if r.done {
		return nil, io.EOF
	}
	r.data = r.data[:0]
	r.event = r.event[:0]
	r.hasData = false
	for {
		line, err := r.readLine()
		if err != nil {
			if err == io.EOF {
				r.done = true
				if len(line) > 0 {
					r.field(line)
				}
				if r.hasData {
					return r.data, nil
				}
			}
			return nil, err
		}
		if len(line) == 0 {
			if r.hasData {
				return r.data, nil
			}
			r.event = r.event[:0]
			continue
		}
		if err := r.field(line); err != nil {
			return nil, err
		}
	}
}

// field interprets one non-empty line.
func (r *Reader) field(line []byte) error {
	if line[0] == ':' {
		return nil // comment, e.g. a keep-alive
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) { // no allocation: the compiler special-cases this
	case "data":
		if r.hasData {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > r.maxLine {
			return fmt.Errorf("%w: event over %d bytes", ErrLineTooLong, r.maxLine)
		}
		r.data = append(r.data, value...)
		r.hasData = true
	case "event":
		r.event = append(r.event[:0], value...)
	}
	// id and retry steer reconnection, which a load client never does.
	return nil
}

// readLine returns the next line without its line ending (LF or CRLF). At
// the end of the stream it returns the last, unterminated line with io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(r.long) > r.maxLine {
				return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, r.maxLine)
			}
			line, err = r.br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	n := len(line)
	if n > 0 && line[n-1] == '\n' {
		n--
		if n > 0 && line[n-1] == '\r' {
			n--
		}
	} else if n > 0 && line[n-1] == '\r' && err == io.EOF {
		n--
	}
	if len(line) > r.maxLine {
		return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, r.maxLine)
	}
	return line[:n], err
}
