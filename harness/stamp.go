package harness

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
)

// readStamp is what a stamping connection knows about its latest read.
// Times are on the run's clock (ns since t0).
type readStamp struct {
	seq    uint64 // reads so far on the connection
	kernel int64  // the kernel's receive time of the read's newest segment; 0 when the read carried none
	floor  int64  // no byte of this read reached the socket before this
	user   int64  // when the read returned to user space
}

// connStamps is a stamping connection's state, shared with the response
// reader. It is written by whichever goroutine reads the connection: the
// transport's read loop for headers, the request's goroutine for the body.
// Once a body reaches its end the read loop may already read the next
// response while the request's goroutine still parses buffered events,
// hence the lock; and the response reader takes its snapshot after each
// body read (stampedBody), not when it parses an event.
type connStamps struct {
	mu   sync.Mutex
	last readStamp
	full bool // the latest read filled the caller's buffer: bytes may remain queued
}

// snapshot returns the latest read's stamp.
func (s *connStamps) snapshot() readStamp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// record notes one read of n bytes into a buffer of size, returned at
// user (run clock) with the kernel's stamp mapped onto the run clock (0
// when absent). The floor of this read is the previous read's stamp, or
// its return time when it did not fill its buffer: a recvmsg returns every
// byte already queued, so bytes it left behind arrived after it.
func (s *connStamps) record(n, size int, user, kernel int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	floor := s.last.kernel
	if !s.full {
		floor = max(floor, s.last.user)
	}
	s.last = readStamp{seq: s.last.seq + 1, kernel: kernel, floor: floor, user: user}
	s.full = n == size
}

// stampedBody reads a response body and keeps the connection's stamp as
// of its latest read: the read that delivered the bytes the SSE reader is
// parsing. The first events may have come with the headers, read by the
// transport's read loop before the body was handed over: the snapshot
// starts from the connection's state then.
type stampedBody struct {
	r    io.Reader
	st   *connStamps
	last readStamp
}

func newStampedBody(r io.Reader, st *connStamps) *stampedBody {
	return &stampedBody{r: r, st: st, last: st.snapshot()}
}

func (b *stampedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.last = b.st.snapshot()
	}
	return n, err
}

// stamper is a connection that stamps its reads.
type stamper interface{ stamps() *connStamps }

// stampsOf returns conn's stamp state, looking through TLS; nil when the
// connection does not stamp.
func stampsOf(conn net.Conn) *connStamps {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if s, ok := conn.(stamper); ok {
		return s.stamps()
	}
	return nil
}

// stampReport counts how the client's connections stamp token arrival,
// for run.json: kernel stamps, or user-space stamps and why.
type stampReport struct {
	mu      sync.Mutex
	kernel  int
	refused int
	why     string // the first refusal
}

func (r *stampReport) ok() {
	r.mu.Lock()
	r.kernel++
	r.mu.Unlock()
}

func (r *stampReport) refuse(why string) {
	r.mu.Lock()
	r.refused++
	if r.why == "" {
		r.why = why
	}
	r.mu.Unlock()
}

// counts returns connections stamped by the kernel, refused, and the first reason.
func (r *stampReport) counts() (kernel, refused int, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kernel, r.refused, r.why
}

// stampSummary names how the run's connections stamped token arrival, for
// run.json, with a note per target that fell back to user space.
func (r *runner) stampSummary() (string, []string) {
	var kernel, refused int
	var notes []string
	for key, c := range r.clients {
		k, n, why := c.stamps.counts()
		kernel += k
		refused += n
		if n > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d of %d connections stamped in user space: %s",
				strings.TrimSuffix(key, "|"+connSuffix(key)), n, n+k, why))
		}
	}
	slices.Sort(notes)
	switch {
	case kernel+refused == 0:
		return "", notes
	case refused == 0:
		return "kernel", notes
	case kernel == 0:
		return "user", notes
	default:
		return "mixed", notes
	}
}

// connSuffix is the connection mode part of a runner's client key.
func connSuffix(key string) string {
	if i := strings.LastIndexByte(key, '|'); i >= 0 {
		return key[i+1:]
	}
	return ""
}
