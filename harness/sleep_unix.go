//go:build linux || darwin || freebsd

package harness

import (
	"syscall"
	"time"
)

// sleepPrecise sleeps d (at most a few ms) in the kernel. The Go runtime
// parks timers in its network poller, which waits in whole milliseconds,
// so a sub-millisecond time.Sleep can oversleep by up to a millisecond;
// nanosleep has microsecond precision and costs no CPU while waiting.
func sleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
