package results

import "time"

// ShardInfo is run.json's record of one shard of a scaled-out run: which
// part of the plan it ran, how its clock related to the coordinator's, and
// when it started each step. A merged run keeps one per shard.
type ShardInfo struct {
	Index int `json:"index"` // 0-based
	Count int `json:"count"`
	// Group names the scaled-out run the shard belongs to: the
	// coordinator's id, shared by every shard, or "" without one.
	Group       string `json:"group,omitempty"`
	RunID       string `json:"run_id,omitempty"` // the shard's own run id (merged runs)
	Coordinator string `json:"coordinator,omitempty"`
	Host        string `json:"host,omitempty"`
	// ClockOffsetNS is the coordinator's clock minus this shard's wall
	// clock, estimated from the round trip with the least delay;
	// ClockRTTNS is that round trip, which bounds the estimate's error
	// (±RTT/2). Both 0 without a coordinator: clocks are then assumed in
	// step (NTP).
	ClockOffsetNS int64       `json:"clock_offset_ns"`
	ClockRTTNS    int64       `json:"clock_rtt_ns"`
	Steps         []ShardStep `json:"steps"`
}

// ShardStep is when a shard started one step.
type ShardStep struct {
	Step int `json:"step"`
	// Start is when the shard began the step, on the coordinator's clock
	// (its own wall clock without a coordinator).
	Start time.Time `json:"start"`
	// Agreed is the start the coordinator gave every shard; zero when the
	// step was not synchronised (no coordinator, or it did not answer).
	Agreed time.Time `json:"agreed,omitzero"`
	// LateNS is Start − Agreed: this shard's own start skew.
	LateNS int64 `json:"late_ns"`
	// Unsynced says why the step started without the others, if it did.
	Unsynced string `json:"unsynced,omitempty"`
}

// MergeInfo is run.json's account of a run merged from shards by
// `testbed merge`: each step's spread of shard starts and windows, and
// what exceeded the limits.
type MergeInfo struct {
	MaxSkewNS int64       `json:"max_skew_ns"` // the limit a step's start spread was held to
	Steps     []MergeStep `json:"steps"`
}

// MergeStep is one merged step's agreement between shards.
type MergeStep struct {
	Step int `json:"step"`
	// StartSpreadNS is the latest shard start minus the earliest, on the
	// common clock.
	StartSpreadNS int64 `json:"start_spread_ns"`
	// WindowStartSpreadNS and WindowEndSpreadNS compare the shards'
	// measured windows (first intended send, last completion).
	WindowStartSpreadNS int64 `json:"window_start_spread_ns"`
	WindowEndSpreadNS   int64 `json:"window_end_spread_ns"`
	// Problems are the limits exceeded, worded for the report.
	Problems []string `json:"problems,omitempty"`
}
