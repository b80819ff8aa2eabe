//go:build !(linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x || mips64 || mips64le))

package harness

import (
	"net"
	"runtime"
	"time"
)

// kernelStamps says whether this build can ask the kernel for receive stamps.
const kernelStamps = false

// stampDial returns conn as it is: kernel receive stamps are read on
// 64-bit Linux only, so token arrival is stamped in user space here.
func stampDial(conn net.Conn, _ time.Time) (net.Conn, string) {
	return conn, "kernel receive stamps are read on 64-bit Linux only, not " + runtime.GOOS + "/" + runtime.GOARCH
}

// holdStamping does nothing where receive stamps are not read.
func holdStamping() (release func()) { return func() {} }
