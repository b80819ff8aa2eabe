// Package calibration answers two questions with measurements.
//
// Is the load client the bottleneck? Calibrate drives the mock (in fixed
// mode, so every request's true TTFT and ITL are known) at rising load and
// compares every client measurement with the mock's ground truth, level by
// level, until the measurement error, the schedule lag or the client's CPU
// passes its bound: that level is the client's ceiling on this machine.
//
// What would the mock need to imitate a real server? Fit reads a run made
// against that server and fits a mock profile: fixed TTFT/ITL with jitter,
// and the engine's step model (β0, β1, β2, max_num_seqs, cold start) from
// the steps reconstructed out of the token arrival times (see steps.go for
// the method and its assumptions).
package calibration
