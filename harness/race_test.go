//go:build race

package harness_test

// raceEnabled: the race detector slows the client and the mock several-fold,
// so millisecond tolerances on real-time measurements do not apply then;
// `make test` checks them again without it.
const raceEnabled = true
