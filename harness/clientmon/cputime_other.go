//go:build !unix

package clientmon

import "time"

// processCPU reports no CPU time where getrusage is missing; the step's CPU
// then comes from the gopsutil samples alone.
func processCPU() (time.Duration, bool) { return 0, false }

// fdLimit is unknown off unix.
func fdLimit() uint64 { return 0 }
