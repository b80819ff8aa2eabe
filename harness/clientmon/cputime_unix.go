//go:build unix

package clientmon

import (
	"syscall"
	"time"
)

// processCPU is the process's user+system CPU time so far, from getrusage,
// which is precise to the microsecond; /proc's clock ticks (10 ms) would be
// too coarse to judge a short step.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// fdLimit is the soft limit on open file descriptors, 0 when unknown.
func fdLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
