//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x || mips64 || mips64le)

package harness

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelStamps says whether this build can ask the kernel for receive stamps.
const kernelStamps = true

// maxStampDelay bounds a plausible distance between a segment's kernel
// stamp and its read. A larger one (or a negative one) means the wall
// clock stepped between the two; the read is then left unstamped rather
// than bent (docs/kernel-stamps.md).
const maxStampDelay = int64(30 * time.Second)

// stampConn is a TCP connection whose reads go through recvmsg with
// SO_TIMESTAMPNS set, so each read returns the kernel's receive time of
// the data with it. Reads go through syscall.RawConn.Read, so a read that
// would block parks the goroutine on the runtime's poller like any
// net.Conn read. It embeds the net.Conn interface, not *net.TCPConn, so
// no io.WriterTo (splice) can read around it.
type stampConn struct {
	net.Conn
	raw  syscall.RawConn
	t0   time.Time
	st   connStamps
	buf  []byte
	n    int
	rerr error
	recv func(fd uintptr) bool // c.recvmsg, bound once so Read allocates nothing
	msg  unix.Msghdr
	iov  unix.Iovec
	oob  [64]byte // one SCM_TIMESTAMPNS needs CmsgSpace(16) = 32 bytes
}

// stampDial wraps conn in a stampConn when the kernel accepts
// SO_TIMESTAMPNS on it; otherwise it returns conn and why not.
func stampDial(conn net.Conn, t0 time.Time) (net.Conn, string) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return conn, fmt.Sprintf("%T is not a TCP connection", conn)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return conn, err.Error()
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return conn, "setsockopt SO_TIMESTAMPNS: " + err.Error()
	}
	c := &stampConn{Conn: conn, raw: raw, t0: t0}
	c.recv = c.recvmsg
	c.st.last.user = int64(time.Since(t0)) // nothing can have arrived before the connection existed
	return c, ""
}

func (c *stampConn) stamps() *connStamps { return &c.st }

// Read reads like net.Conn's Read and stamps the read.
func (c *stampConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.buf = p
	c.n, c.rerr = 0, nil
	err := c.raw.Read(c.recv)
	c.buf = nil
	c.iov.Base = nil // do not keep the caller's buffer alive
	if err == nil {
		err = c.rerr
	}
	if err != nil {
		return 0, c.opError(err)
	}
	if c.n == 0 {
		return 0, io.EOF
	}
	now := time.Now()
	user := int64(now.Sub(c.t0))
	var kernel int64
	if sec, nsec, ok := parseStamp(c.oob[:c.msg.Controllen]); ok {
		// The delay is taken on the wall clock, whose reading the stamp
		// is, and subtracted from the monotonic reading of the same
		// instant: only a clock step inside this delay could bend it.
		delay := now.UnixNano() - (sec*1e9 + nsec)
		if delay >= 0 && delay < maxStampDelay {
			kernel = user - delay
		}
	}
	c.st.record(c.n, len(p), user, kernel)
	return c.n, nil
}

// recvmsg is the RawConn.Read callback: one non-blocking recvmsg; false
// asks the poller to wait for readability and call again.
func (c *stampConn) recvmsg(fd uintptr) bool {
	c.iov.Base = &c.buf[0]
	c.iov.SetLen(len(c.buf))
	c.msg.Iov = &c.iov
	c.msg.SetIovlen(1)
	c.msg.Control = &c.oob[0]
	c.msg.SetControllen(len(c.oob))
	c.msg.Flags = 0
	for {
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
		switch errno {
		case 0:
			c.n = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			c.rerr = os.NewSyscallError("recvmsg", errno)
			return true
		}
	}
}

// opError wraps a read error the way net.Conn's Read does, so callers
// that look for timeouts or closed connections see what they expect.
func (c *stampConn) opError(err error) error {
	if op, ok := err.(*net.OpError); ok {
		op.Op = "read"
		return op
	}
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// parseStamp finds an SCM_TIMESTAMPNS control message in oob and returns
// its time (CLOCK_REALTIME). It reads the headers itself rather than
// through unix.ParseSocketControlMessage, which allocates on every read.
// A cmsghdr on 64-bit Linux is a size_t length, then level and type
// (int32 each); data follows, each message padded to 8 bytes.
func parseStamp(oob []byte) (sec, nsec int64, ok bool) {
	const hdr = unix.SizeofCmsghdr
	for len(oob) >= hdr {
		l := binary.NativeEndian.Uint64(oob[0:8])
		level := int32(binary.NativeEndian.Uint32(oob[8:12]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:16]))
		if l < hdr || l > uint64(len(oob)) {
			return 0, 0, false
		}
		if level == unix.SOL_SOCKET && typ == unix.SCM_TIMESTAMPNS && l >= hdr+16 {
			sec = int64(binary.NativeEndian.Uint64(oob[hdr : hdr+8]))
			nsec = int64(binary.NativeEndian.Uint64(oob[hdr+8 : hdr+16]))
			return sec, nsec, nsec >= 0 && nsec < 1e9
		}
		next := unix.CmsgSpace(int(l) - hdr)
		if next > len(oob) {
			return 0, 0, false
		}
		oob = oob[next:]
	}
	return 0, 0, false
}

// holdStamping keeps one socket with SO_TIMESTAMPNS open until release is
// called. The kernel turns receive stamping on for the host only after a
// socket asks for it, and asynchronously (net_enable_timestamp defers the
// switch to a work queue), and off again when the last such socket closes:
// holding one for the whole run means its first reads, and those after a
// moment with no connection open, are stamped too.
func holdStamping() (release func()) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) != nil {
		unix.Close(fd)
		return func() {}
	}
	return func() { unix.Close(fd) }
}
