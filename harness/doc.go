// Package harness is the load client of the testbed: it turns a plan into
// requests, paces them (closed-loop concurrency or open-loop arrivals
// against absolute times), sends them over a streaming HTTP client that
// timestamps every chunk, writes one record per request, and aggregates
// the records into per-step summaries.
//
// The flow follows the files: plan.go (what to run) → dataset.go (the
// requests) → pacer.go (when to send them) → client.go (send and time
// them) → record.go (requests.jsonl) → summary.go (HDR percentiles per
// step) → table.go (the terminal table). Metric definitions are in
// docs/metrics.md; every time is a monotonic offset from the run's start.
package harness
