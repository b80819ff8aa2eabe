//go:build race

package netem

// raceSlack widens upper timing bounds: the race detector slows every
// goroutine several times over, the proxy's and the client's alike.
const raceSlack = 4
