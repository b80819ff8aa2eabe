// Package ceiling finds the load client's ceiling on this machine: Run drives
// the mock (in fixed mode, so every request's true TTFT and ITL are known) at
// rising load and compares every client measurement with the mock's ground
// truth, level by level, until the measurement error, the schedule lag or
// the client's CPU passes its bound. `testbed calibrate` is its command.
package ceiling
