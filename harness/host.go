package harness

import (
	"context"
	"os"
	"runtime"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/mem"
)

// HostFacts gathers what the client machine is. Facts that cannot be read
// are listed in Errors rather than failing the run.
func HostFacts(ctx context.Context) results.Host {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h := results.Host{
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	h.Hostname, _ = os.Hostname()
	note := func(what string, err error) { h.Errors = append(h.Errors, what+": "+err.Error()) }
	if infos, err := cpu.InfoWithContext(ctx); err != nil {
		note("cpu model", err)
	} else if len(infos) > 0 {
		h.CPUModel = infos[0].ModelName
	}
	if n, err := cpu.CountsWithContext(ctx, false); err != nil {
		note("cpu cores", err)
	} else {
		h.CPUCores = n
	}
	if n, err := cpu.CountsWithContext(ctx, true); err != nil {
		note("cpu threads", err)
	} else {
		h.CPUThreads = n
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		note("memory", err)
	} else {
		h.MemoryBytes = vm.Total
	}
	if hi, err := host.InfoWithContext(ctx); err != nil {
		note("host", err)
	} else {
		h.Platform = hi.Platform + " " + hi.PlatformVersion
		h.Kernel = hi.KernelVersion
		if hi.VirtualizationSystem != "" {
			h.Virtualization = hi.VirtualizationSystem + "/" + hi.VirtualizationRole
		}
	}
	return h
}
