package clientmon

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// AvailableCores is how many CPU cores the client process may use at once:
// the smallest of GOMAXPROCS, the logical CPUs and the cgroup CPU quota. It
// is the denominator of the client-bound CPU rule, because a process whose
// quota is 2 cores is saturated at 200 % whatever the host has.
func AvailableCores() float64 {
	cores := float64(runtime.GOMAXPROCS(0))
	if n := float64(runtime.NumCPU()); n < cores {
		cores = n
	}
	if q, ok := cgroupQuota(); ok && q < cores {
		cores = q
	}
	return cores
}

// cgroupQuota reads the CPU quota in cores from cgroup v2 (cpu.max) or v1
// (cpu.cfs_quota_us / cpu.cfs_period_us). ok is false when there is none.
// Go 1.25+ already lowers the default GOMAXPROCS to the quota; reading it
// here as well covers a GOMAXPROCS set above it by the user.
func cgroupQuota() (float64, bool) {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			return ratio(f[0], f[1])
		}
		return 0, false
	}
	q, errQ := os.ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	p, errP := os.ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if errQ != nil || errP != nil {
		return 0, false
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(quota, period string) (float64, bool) {
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return q / p, true
}
