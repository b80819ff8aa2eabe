//go:build race

package engine

// raceEnabled scales big virtual-time workloads down under the race
// detector, which slows every channel operation several-fold.
const raceEnabled = true
