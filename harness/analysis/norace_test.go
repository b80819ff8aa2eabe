//go:build !race

package analysis_test

// raceEnabled: see race_test.go.
const raceEnabled = false
