//go:build !race

package harness_test

// raceEnabled: see race_test.go.
const raceEnabled = false
