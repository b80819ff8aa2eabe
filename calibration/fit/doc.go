// Package fit derives a mock profile from a run made against a real server:
// fixed TTFT/ITL with jitter; the engine's step model (β0, β1, β2,
// max_num_seqs, cold start) from the steps reconstructed out of the token
// arrival times (see steps.go for the method and its assumptions); and a
// load curve, TTFT and ITL distributions at each number of requests in
// flight, for servers that slow down under load without batching in
// lockstep (loadcurve.go). The mode is chosen by how well each model,
// replayed in virtual time, reproduces the steps of the run it was not
// fitted on (choose.go). `testbed fit` is its command.
package fit
