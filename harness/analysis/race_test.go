//go:build race

package analysis_test

// raceEnabled: the race detector slows the client and the mock several
// times over, so tests that judge millisecond timing skip those checks.
const raceEnabled = true
