package results

// TargetNetwork is one target's network path as a run measured it, in
// run.json: the round trip without load, from TCP connects timed before
// the first step and after each of the target's steps, and the emulated
// link in front of it, if any.
type TargetNetwork struct {
	Target string `json:"target"`
	// RTTMS is the median of the probes' connect times: the network round
	// trip the target's requests pay without load. 0 with no probe.
	RTTMS  float64    `json:"rtt_ms"`
	Probes []RTTProbe `json:"probes"`
	// Link describes the emulated link ("" when the target was reached
	// over the real network) and Stats counts what it did.
	Link      string     `json:"link,omitempty"`
	LinkStats *LinkStats `json:"link_stats,omitempty"`
}

// RTTProbe is one TCP connect timed to measure the round trip.
type RTTProbe struct {
	AtNS      int64   `json:"at_ns"`      // when the connect began, since the run's start
	AfterStep int     `json:"after_step"` // the step it followed; -1 before the first
	RTTMS     float64 `json:"rtt_ms"`     // connect time; 0 when it failed
	Error     string  `json:"error,omitempty"`
}

// LinkStats are an emulated link's counts over the run.
type LinkStats struct {
	Connections int64   `json:"connections"`
	BytesUp     int64   `json:"bytes_up"`
	BytesDown   int64   `json:"bytes_down"`
	Resets      int64   `json:"resets"`
	Stalls      int64   `json:"stalls"`
	Losses      int64   `json:"losses"` // segments lost and retransmitted
	RTOs        int64   `json:"rtos"`   // of them, recovered by the retransmission timeout
	Chunks      int64   `json:"chunks"`
	Late1ms     int64   `json:"late_over_1ms"` // chunks delivered over 1 ms after their time
	MaxLateMS   float64 `json:"max_late_ms"`
}

// NetworkRTT returns each target's measured round trip in ms, by name,
// for the targets that have one.
func NetworkRTT(n []TargetNetwork) map[string]float64 {
	out := map[string]float64{}
	for _, t := range n {
		if t.RTTMS > 0 {
			out[t.Target] = t.RTTMS
		}
	}
	return out
}
