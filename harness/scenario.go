package harness

// Scenario names, as they appear in records and summaries. The ladders
// ("concurrency", "rate") come from Load; the others from Plan.Scenarios
// (scenarios.go), and analysis and reports recognise them by these names.
const (
	ScenarioConcurrency  = "concurrency"   // closed-loop concurrency ladder
	ScenarioRate         = "rate"          // open-loop rate ladder
	ScenarioColdStart    = "cold_start"    // one request after an idle gap, repeated
	ScenarioWarm         = "warm"          // the same requests back to back: cold start's reference
	ScenarioLongContext  = "long_context"  // one step per input-length bucket
	ScenarioStreaming    = "streaming"     // streaming half of the streaming comparison
	ScenarioNonStreaming = "non_streaming" // non-streaming half
	ScenarioConnReuse    = "conn_reuse"    // keep-alive connections
	ScenarioConnNew      = "conn_new"      // a new connection (and TLS handshake) per request
	ScenarioShortOutput  = "short_output"  // request throughput: short outputs
	ScenarioLongOutput   = "long_output"   // token throughput: long outputs
)
