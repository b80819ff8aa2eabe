// Package harness is the load client of the testbed: it turns a plan into
// requests, paces them (closed-loop concurrency or open-loop arrivals
// against absolute times), sends them over a streaming HTTP client that
// timestamps every chunk, writes one record per request, and aggregates
// the records into per-step summaries. One call, Run, does all of it,
// including the client monitor and the plan's server-side samplers.
//
// The flow follows the files: plan.go (what to run; scenario.go expands
// scenarios into steps) → run.go (the orchestration: preflight, the results
// directory, the watchers of sampling.go, the steps) → dataset.go (the
// requests; sizeprompts.go sizes long-context prompts for a server's
// tokenizer) → pacer.go and loops.go (when to send them) → client.go and
// chunk.go (send them, time and parse every chunk) → writer.go (the one
// writer of requests.jsonl and histograms.jsonl, aggregating each step) →
// summary.go (HDR percentiles per step) → table.go (the terminal table).
// The files themselves are defined in package results; every RunOption is
// in options.go. Metric definitions are in docs/metrics.md; every time is a
// monotonic offset from the run's start.
package harness
