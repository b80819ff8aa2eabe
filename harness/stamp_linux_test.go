//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x || mips64 || mips64le)

package harness

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stampPair returns a stamping client connection and the server's end of
// a loopback TCP connection.
func stampPair(t *testing.T, t0 time.Time) (*stampConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, why := stampDial(raw, t0)
	if why != "" {
		raw.Close()
		t.Skipf("the kernel refused receive stamps here: %s", why)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { conn.Close(); srv.Close() })
	sc := conn.(*stampConn)
	waitStamped(t, sc, srv)
	return sc, srv
}

// waitStamped exchanges bytes until a read carries a stamp: the kernel
// turns stamping on for the host asynchronously after the first socket
// asks for it (docs/kernel-stamps.md).
func waitStamped(t *testing.T, c *stampConn, srv net.Conn) {
	t.Helper()
	release := holdStamping()
	t.Cleanup(release)
	buf := make([]byte, 1)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := srv.Write([]byte{'.'}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		if c.stamps().snapshot().kernel != 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no read carried a kernel stamp within 2 s")
}

// TestStampConnLateReader writes, waits, then reads: the user-space read
// comes a whole wait after the bytes arrived, the kernel's stamp does not.
func TestStampConnLateReader(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Millisecond
	t0 := time.Now()
	c, srv := stampPair(t, t0)
	sent := int64(time.Since(t0))
	if _, err := srv.Write([]byte("data: one\n\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(wait)
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "data: one\n\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	st := c.stamps().last
	if st.kernel == 0 {
		t.Fatal("the read carried no kernel stamp")
	}
	// The stamp lies between the write and the read; the read is a wait later.
	if st.kernel < sent || st.user-st.kernel < int64(wait) {
		t.Errorf("sent %d, kernel %d, user %d: want sent <= kernel <= user - %v", sent, st.kernel, st.user, wait)
	}
	if st.kernel-sent > int64(5*time.Millisecond) {
		t.Errorf("kernel stamp %v after the write: want well under the reader's wait", time.Duration(st.kernel-sent))
	}
}

// TestStampConnCoalesced writes two events apart in time before the reader
// reads: one read returns both, stamped with the second's arrival, and the
// tracker counts the first as coalesced, bounded by the time between them.
func TestStampConnCoalesced(t *testing.T) {
	t.Parallel()
	const gap = 20 * time.Millisecond
	t0 := time.Now()
	c, srv := stampPair(t, t0)
	if _, err := srv.Write([]byte("data: a\n\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gap)
	if _, err := srv.Write([]byte("data: b\n\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || n != 18 {
		t.Fatalf("read %q, %v: want both events in one read", buf[:n], err)
	}
	kt := kernelTrack{body: newStampedBody(c, c.stamps())}
	for range 2 {
		now := int64(time.Since(t0))
		kt.token(kt.event(), now)
	}
	if kt.coalesced != 1 {
		t.Fatalf("coalesced %d, want 1", kt.coalesced)
	}
	// The first event is late by about the gap; the bound must cover it.
	if kt.maxBound < int64(gap) {
		t.Errorf("bound %v does not cover the %v the first event waited", time.Duration(kt.maxBound), gap)
	}
}

// TestStampConnEOFAndClose checks the end of a stream and a closed connection.
func TestStampConnEOFAndClose(t *testing.T) {
	t.Parallel()
	c, srv := stampPair(t, time.Now())
	if _, err := srv.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "x" {
		t.Fatalf("ReadAll = %q, %v; want x and no error (EOF ends it)", b, err)
	}
	c.Close()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a closed connection succeeded")
	}
	if err := c.SetReadDeadline(time.Now()); err == nil {
		t.Fatal("deadline on a closed connection succeeded")
	}
}

// TestStampConnDeadline checks that a read deadline still ends a read
// that parked on the poller, with a timeout error.
func TestStampConnDeadline(t *testing.T) {
	t.Parallel()
	c, _ := stampPair(t, time.Now())
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !asNetError(err, &ne) || !ne.Timeout() {
		t.Fatalf("err %v: want a net.Error timeout", err)
	}
}

func asNetError(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	binary.NativeEndian.PutUint64(b[0:8], uint64(unix.CmsgLen(len(data))))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	copy(b[unix.SizeofCmsghdr:], data)
	return b
}

func timespec(sec, nsec int64) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b[0:8], uint64(sec))
	binary.NativeEndian.PutUint64(b[8:16], uint64(nsec))
	return b
}

func TestParseStamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		oob       []byte
		sec, nsec int64
		ok        bool
	}{
		// The usual case: one SCM_TIMESTAMPNS.
		{"one stamp", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1700000000, 5)), 1700000000, 5, true},
		// Another message first (e.g. SCM_RIGHTS-sized data): skipped by its padded length.
		{"after another", append(cmsg(unix.SOL_IP, 1, []byte{1, 2, 3}),
			cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(7, 8))...), 7, 8, true},
		// No control data: the read carried no stamp.
		{"empty", nil, 0, 0, false},
		// A header claiming more bytes than there are.
		{"truncated", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1, 2))[:20], 0, 0, false},
		// Nanoseconds out of range are not a time.
		{"bad nsec", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1, 2e9)), 1, 2e9, false},
		// The right type at the wrong level.
		{"wrong level", cmsg(unix.SOL_IP, unix.SCM_TIMESTAMPNS, timespec(1, 2)), 0, 0, false},
	} {
		sec, nsec, ok := parseStamp(tc.oob)
		if ok != tc.ok || (ok && (sec != tc.sec || nsec != tc.nsec)) {
			t.Errorf("%s: got %d.%09d %v, want %d.%09d %v", tc.name, sec, nsec, ok, tc.sec, tc.nsec, tc.ok)
		}
	}
}

// FuzzParseStamp checks the allocation-free parser against x/sys/unix's
// ParseSocketControlMessage on arbitrary control data.
func FuzzParseStamp(f *testing.F) {
	f.Add(cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1700000000, 5)))
	f.Add(append(cmsg(unix.SOL_IP, 1, []byte{1}), cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(3, 4))...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, oob []byte) {
		sec, nsec, ok := parseStamp(oob)
		msgs, err := unix.ParseSocketControlMessage(oob)
		if err != nil {
			return // x/sys rejects what we may read partly; only agreement on valid data matters
		}
		var want []byte
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
				want = m.Data[:16]
				break
			}
		}
		if want == nil {
			if ok {
				t.Fatalf("parsed %d.%d where unix finds no stamp", sec, nsec)
			}
			return
		}
		wsec := int64(binary.NativeEndian.Uint64(want[0:8]))
		wnsec := int64(binary.NativeEndian.Uint64(want[8:16]))
		valid := wnsec >= 0 && wnsec < 1e9
		if ok != valid || (ok && (sec != wsec || nsec != wnsec)) {
			t.Fatalf("got %d.%d %v, unix says %d.%d (valid %v)", sec, nsec, ok, wsec, wnsec, valid)
		}
	})
}
