//go:build race

package docker_test

// raceEnabled: the race detector slows this process (the client) several
// times over, so client-side timing tolerances do not apply to it.
const raceEnabled = true
