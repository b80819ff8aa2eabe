package wake

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fdAlarm goes off at the earlier of two clocks set to the same time:
//
//   - a timerfd read through the runtime's network poller, which wakes an
//     idle process on time (a timerfd expiry ends the poller's epoll_wait
//     at once, where the runtime's own timers wait in whole milliseconds);
//   - a runtime timer, which wakes a busy process on time (the scheduler
//     checks timers at every goroutine switch, but polls the network only
//     when its run queues are empty, or every 10 ms).
//
// Whichever fires second finds the alarm already reset, or causes one
// spurious wait() return, which the Waker's loop tolerates.
type fdAlarm struct {
	*timerAlarm // the runtime-timer half, and the stop channel
	fd          int
	f           *os.File
	fired       chan struct{} // the timerfd went off (buffered 1)
}

func newAlarm() alarm {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newTimerAlarm()
	}
	// A non-blocking descriptor handed to os.NewFile joins the poller.
	a := &fdAlarm{timerAlarm: newTimerAlarm(), fd: fd, f: os.NewFile(uintptr(fd), "timerfd"),
		fired: make(chan struct{}, 1)}
	go a.read()
	return a
}

// read forwards each timerfd expiry to fired until the file is closed.
func (a *fdAlarm) read() {
	var buf [8]byte
	for {
		if _, err := a.f.Read(buf[:]); err != nil {
			return
		}
		select {
		case a.fired <- struct{}{}:
		default:
		}
	}
}

func (a *fdAlarm) set(d time.Duration) {
	// An all-zero setting would disarm the timer: 1 ns is "now".
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(d, 1)))}
	// EBADF after close is the only failure, and then nobody waits.
	_ = unix.TimerfdSettime(a.fd, 0, &its, nil)
	a.timerAlarm.set(d)
}

func (a *fdAlarm) wait() bool {
	select {
	case <-a.fired:
		return true
	case <-a.t.C:
		return true
	case <-a.stop:
		return false
	}
}

func (a *fdAlarm) close() {
	a.timerAlarm.close()
	a.f.Close()
}
