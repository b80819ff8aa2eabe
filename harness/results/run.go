package results

import "time"

// RunInfo is run.json: everything needed to understand and rerun a run. P
// is the plan's type (harness.Plan); the contract keeps its shape, the
// harness owns its meaning.
type RunInfo[P any] struct {
	FormatVersion int       `json:"format_version"`
	RunID         string    `json:"run_id"`
	Version       string    `json:"version"`
	Seed          int64     `json:"seed"`
	Plan          P         `json:"plan"` // fully resolved, defaults filled in
	Start         time.Time `json:"start"`
	End           time.Time `json:"end,omitzero"`
	Interrupted   bool      `json:"interrupted"`
	Records       int64     `json:"records"`
	Host          Host      `json:"host"`
	// Network is each target's measured round trip and emulated link.
	// Added within format version 2: a run.json without it (an older run)
	// says nothing about the network, and readers treat it as unmeasured.
	Network []TargetNetwork `json:"network,omitempty"`
	// TokenStamps says how token arrival was stamped over the run's
	// connections: "kernel" (the kernel's receive stamps, user-space ones
	// kept beside them), "user" or "mixed"; TokenStampNotes say why a
	// connection fell back to user-space stamps (docs/kernel-stamps.md).
	TokenStamps     string   `json:"token_stamps,omitempty"`
	TokenStampNotes []string `json:"token_stamp_notes,omitempty"`
	// Shard is set when this run is one shard of a scaled-out run.
	Shard *ShardInfo `json:"shard,omitempty"`
	// Shards and Merge are set on a run merged from shards.
	Shards []ShardInfo `json:"shards,omitempty"`
	Merge  *MergeInfo  `json:"merge,omitempty"`
}

// Host describes the machine that ran the client, for run.json.
type Host struct {
	Hostname       string   `json:"hostname"`
	OS             string   `json:"os"`
	Platform       string   `json:"platform,omitempty"`
	Kernel         string   `json:"kernel,omitempty"`
	Arch           string   `json:"arch"`
	CPUModel       string   `json:"cpu_model,omitempty"`
	CPUCores       int      `json:"cpu_cores,omitempty"`   // physical
	CPUThreads     int      `json:"cpu_threads,omitempty"` // logical
	MemoryBytes    uint64   `json:"memory_bytes,omitempty"`
	GoVersion      string   `json:"go_version"`
	GOMAXPROCS     int      `json:"gomaxprocs"`
	Virtualization string   `json:"virtualization,omitempty"`
	Errors         []string `json:"errors,omitempty"` // facts that could not be read
}
