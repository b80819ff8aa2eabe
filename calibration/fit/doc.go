// Package fit derives a mock profile from a run made against a real server:
// fixed TTFT/ITL with jitter, and the engine's step model (β0, β1, β2,
// max_num_seqs, cold start) from the steps reconstructed out of the token
// arrival times (see steps.go for the method and its assumptions).
// `testbed fit` is its command.
package fit
