// Package serverside samples the server's side of a run into a timeline
// that lines up with the harness's per-request records: the serving
// engine's own Prometheus metrics (vLLM, TGI, the mock), a DCGM exporter or
// `testbed gpu-agent` on a remote GPU host, and the local GPUs through
// gpu.NVML.
//
// A Sampler reads one or more Sources on the shared sampling loop
// (results.Periodic) and writes one JSON line per reading. Every line
// carries t_ns, the nanoseconds since a start time the caller supplies (the
// harness's run start), on the monotonic clock, so a GPU sample and a
// request's first token share one time axis.
//
// Prometheus scrapes a /metrics endpoint and keeps a configured set of
// series (DefaultSeries: vLLM's, TGI's and DCGM's).
//
// Sampling never blocks on the disk: readings go into a bounded buffer that a
// separate loop writes out. When the buffer is full a reading is dropped and
// counted; the count shows in Stats and in the next line written
// (dropped_before), never hidden.
package serverside
