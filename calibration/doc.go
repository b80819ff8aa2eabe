// Package calibration holds the testbed's two measurements of itself, one
// sub-package each:
//
//   - ceiling: is the load client the bottleneck? It drives the mock, whose
//     every true TTFT and ITL is known, at rising load and finds the level
//     where the client's measurement error, schedule lag or CPU passes its
//     bound: the client's ceiling on this machine.
//   - fit: what would the mock need to imitate a real server? It reads a run
//     made against that server and fits a mock profile to it.
package calibration
