//go:build !race

package netem

// raceSlack widens upper timing bounds under the race detector only.
const raceSlack = 1
