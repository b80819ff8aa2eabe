//go:build !linux

package mockllm

import "time"

func setTimerSlack() {}

// preciseSleep falls back to the runtime's timers off Linux.
func preciseSleep(d time.Duration) { time.Sleep(d) }
