//go:build race

package fit

// raceEnabled: the race detector slows the mock and the client several-fold,
// so real-time measurements through HTTP say nothing about the fit then.
const raceEnabled = true
