package mockllm

import (
	"fmt"
	"time"
)

// faultPlan is what will go wrong with one request.
type faultPlan struct {
	kind     string        // "" or one of the Fault* names
	cutAfter int           // stream_cut: tokens written before the cut
	stallAt  int           // stall: index of the first delayed token
	stallFor time.Duration // stall: delay
}

const faultSalt = 0x3c6ef372fe94f82b

// planFaults draws the faults of request id (at most one: server_error,
// rate_limit, stream_cut, stall are tried in that order), or applies the
// forced one from X-Testbed-Fault. outTokens places cuts and stalls.
func (s *Server) planFaults(id, forced string, outTokens int) (faultPlan, *apiError) {
	f := s.cfg.faults
	base := mix64(uint64(s.cfg.seed)^faultSalt, fingerprintOf(id))
	u := func(k uint64) float64 { return float64(mix64(base, k)>>11) / (1 << 53) }
	var p faultPlan
	switch forced {
	case "":
		switch {
		case u(1) < f.ServerErrorRate:
			p.kind = FaultServerError
		case u(2) < f.RateLimitRate:
			p.kind = FaultRateLimit
		case u(3) < f.StreamCutRate:
			p.kind = FaultStreamCut
		case u(4) < f.StallRate:
			p.kind = FaultStall
		}
	case FaultServerError, FaultRateLimit, FaultStreamCut, FaultStall:
		p.kind = forced
	default:
		return p, badRequest("X-Testbed-Fault", fmt.Sprintf("X-Testbed-Fault: unknown fault %q (want rate_limit, server_error, stream_cut or stall)", forced))
	}
	// A position in [1, outTokens-1], so the stream has tokens on both sides
	// of the fault where it can; 0 when the output is a single token.
	pos := func(k uint64) int {
		if outTokens <= 1 {
			return 0
		}
		return 1 + int(mix64(base, k)%uint64(outTokens-1))
	}
	switch p.kind {
	case FaultStreamCut:
		p.cutAfter = pos(5)
		if f.StreamCutAfter > 0 {
			p.cutAfter = min(f.StreamCutAfter, max(outTokens-1, 0))
		}
	case FaultStall:
		p.stallAt = pos(6)
		p.stallFor = f.StallDuration
		if p.stallFor <= 0 {
			p.stallFor = defaultStall
		}
	}
	return p, nil
}

const (
	defaultStall      = 500 * time.Millisecond
	defaultRetryAfter = time.Second
)

func fingerprintOf(s string) uint64 {
	h := newFingerprint()
	h.add(s)
	return h.sum()
}
