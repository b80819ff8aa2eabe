// Package results is the contract of a results directory: the names of its
// files, the type of every line and document in them, their readers and
// writers, and the version of the format. Everything that writes or reads a
// results directory (the harness, the samplers, the client monitor, report,
// fit, calibrate) goes through this package, so the format is defined once.
//
// A results directory holds:
//
//	requests.jsonl        one Record per request (the source of truth)
//	run.json              RunInfo: plan, seed, host, time window, format version
//	summary.json          Summary: per-step aggregates of the records
//	histograms.jsonl      StepHistograms: the same latencies in lossless, mergeable form
//	client.jsonl          ClientSample and Verdict lines: the client's self-monitoring
//	server_metrics.jsonl  Sample lines: the server's Prometheus metrics
//	gpu.jsonl             Sample lines: NVML readings of the GPUs
//	analysis.json         the analysis `testbed report` derives
//	report.md, report.html
//
// Every time offset in these files is in nanoseconds (or seconds, where the
// field name says so) since the run's start, on the harness's monotonic
// clock, so lines of different files can be read against each other.
package results

// File names inside a results directory.
const (
	RecordsFile       = "requests.jsonl"
	RunFile           = "run.json"
	SummaryFile       = "summary.json"
	ClientFile        = "client.jsonl"
	ServerMetricsFile = "server_metrics.jsonl"
	GPUFile           = "gpu.jsonl"
	HistogramsFile    = "histograms.jsonl"
	AnalysisFile      = "analysis.json"
	ReportMarkdown    = "report.md"
	ReportHTML        = "report.html"
	// CalibrationFile is what `testbed calibrate` writes in its own
	// directory, beside one results directory per load level.
	CalibrationFile = "calibration.json"
)

// FormatVersion is the version of this format, written into run.json.
// Version 1 had no format_version field; its files read the same. A field
// added within a version is optional: readers treat its absence as "not
// measured" (run.json's network), so the version changes only when a
// field changes meaning or an old reader would misread a new file.
const FormatVersion = 2
