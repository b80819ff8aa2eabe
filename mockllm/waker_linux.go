package mockllm

import (
	"syscall"
	"time"
)

// setTimerSlack asks Linux for 1 ns timer slack on this thread (the
// default 50 µs would blur every nanosleep); failure only costs precision.
func setTimerSlack() {
	const prSetTimerslack = 29
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
}

// preciseSleep blocks the calling thread for d with nanosleep, which,
// unlike the runtime's epoll_wait, has sub-millisecond resolution.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
