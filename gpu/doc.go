// Package gpu samples the server side of a run — GPU state and the serving
// engine's own metrics — into a timeline that lines up with the harness's
// per-request records (SPEC.md, methodology point 19).
//
// A Sampler reads one or more Sources on a ticker and writes one JSON line
// per reading. Every line carries t_ns, the nanoseconds since a start time
// the caller supplies (the harness's run start), taken on the monotonic
// clock, so a GPU sample and a request's first token share one time axis.
//
// Two kinds of Source exist:
//
//   - NVML reads the local GPUs through github.com/NVIDIA/go-nvml:
//     utilisation, memory, power, temperature, SM clock and, on Hopper and
//     later, GPM SM / DRAM-bandwidth utilisation. NVML's "GPU utilization" is
//     the share of time any kernel ran, not how busy the SMs were; the GPM
//     figures say more. NVML needs cgo and libnvidia-ml.so.1 at run time; a
//     build without cgo (the static image) compiles, and OpenNVML reports
//     that NVML is not available.
//   - Prometheus scrapes a /metrics endpoint — a DCGM exporter on a remote GPU
//     host, vLLM or TGI — and keeps a configured set of series.
//
// For a GPU host without a DCGM exporter, NewAgent serves NVML readings
// as Prometheus metrics under DCGM's names and units (`testbed gpu-agent`),
// so the harness samples a remote GPU with a Prometheus source and the
// default series, whichever exporter runs there.
//
// Sampling never blocks on the disk: readings go into a bounded buffer that a
// separate loop writes out. When the buffer is full a reading is dropped and
// counted; the count shows in Stats and in the next line written
// (dropped_before), never hidden.
package gpu
