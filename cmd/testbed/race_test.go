//go:build race

package main

// raceEnabled: the race detector slows the client and the mock several
// times over, so timing-dependent verdicts only log under it; the Makefile
// runs them again without it.
const raceEnabled = true
