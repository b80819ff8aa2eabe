//go:build race

package report

// raceEnabled: the race detector slows the client and the mock several
// times over, so timing-dependent findings only log under it.
const raceEnabled = true
