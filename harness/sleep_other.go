//go:build !(linux || darwin || freebsd)

package harness

import "time"

// sleepPrecise falls back to time.Sleep where nanosleep is not available.
func sleepPrecise(d time.Duration) { time.Sleep(d) }
