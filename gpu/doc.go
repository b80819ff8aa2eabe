// Package gpu reads GPUs: NVML reads the local GPUs through
// github.com/NVIDIA/go-nvml (utilisation, memory, power, temperature, SM
// clock and, on Hopper and later, GPM SM / DRAM-bandwidth utilisation) as a
// serverside.Source, and NewAgent serves those readings as Prometheus
// metrics under DCGM's names and units (`testbed gpu-agent`), so the
// harness samples a remote GPU host without a DCGM exporter the same way
// as one with it.
//
// NVML's "GPU utilization" is the share of time any kernel ran, not how
// busy the SMs were; the GPM figures say more. NVML needs cgo and
// libnvidia-ml.so.1 at run time; a build without cgo (the static image)
// compiles, and OpenNVML reports that NVML is not available.
package gpu
