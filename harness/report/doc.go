// Package report renders a run's results as report.md and a self-contained
// report.html (inline SVG charts drawn by this package; nothing is fetched
// from the network to open it). The order follows how results are read:
// conclusions first — per scenario a ranked recommendation with its key
// numbers —, then each dimension's tables and charts, then limitations and
// uncertainty filled in from what the run saw, then the environment and
// every parameter needed to rerun it.
package report
