package analysis

import (
	"math"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

// TestDecompose checks the parts of single requests exactly, from their
// stamps, and what a step's decomposition leaves out.
func TestDecompose(t *testing.T) {
	t.Parallel()
	const msNS = int64(1e6)
	cases := []struct {
		name  string
		rec   results.Record
		parts [8]float64 // ms, in Parts' order
		setup float64
	}{
		// A reused connection: no DNS, connect or TLS; TTFB from the write.
		{"reused", results.Record{SentNS: 10 * msNS, ConnNS: 10 * msNS, WroteNS: 11 * msNS, FirstByteNS: 61 * msNS,
			FirstTokenNS: 62 * msNS, LastTokenNS: 162 * msNS, ConnReused: true},
			[8]float64{0, 0, 0, 0, 1, 50, 1, 100}, 0},
		// A new TLS connection: DNS 1, connect 50, TLS 50 and 1 ms of the
		// transport's own around them.
		{"new tls", results.Record{SentNS: 0, DNSNS: msNS, ConnectNS: 50 * msNS, TLSNS: 50 * msNS, ConnNS: 102 * msNS,
			WroteNS: 102 * msNS, FirstByteNS: 160 * msNS, FirstTokenNS: 160 * msNS, LastTokenNS: 200 * msNS},
			[8]float64{1, 50, 50, 1, 0, 58, 0, 40}, 101},
		// Not streamed: no first token apart from the body; decode is 0
		// from the first byte to the end.
		{"whole body", results.Record{SentNS: 0, ConnNS: 0, WroteNS: msNS, FirstByteNS: 90 * msNS,
			LastTokenNS: 90 * msNS, DoneNS: 91 * msNS, ConnReused: true},
			[8]float64{0, 0, 0, 0, 1, 89, 0, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parts, setup := splitRecord(&c.rec)
			if parts != c.parts || setup != c.setup {
				t.Errorf("parts %v setup %v, want %v %v", parts, setup, c.parts, c.setup)
			}
			sum := 0.0
			for _, p := range parts {
				sum += p
			}
			if e2e := ms(c.rec.LastTokenNS - c.rec.SentNS); math.Abs(sum-e2e) > 1e-9 {
				t.Errorf("parts add up to %v, E2E is %v", sum, e2e)
			}
		})
	}
}

// TestDecomposeStep: warm-up and failed requests are left out, percentiles
// are nearest-rank over the step, and TTFT's network share is the round
// trip plus the median set-up.
func TestDecomposeStep(t *testing.T) {
	t.Parallel()
	const msNS = int64(1e6)
	var recs []results.Record
	for i := range 10 {
		// TTFB 10, 20, …, 100 ms; every other request on a new connection
		// with a 40 ms connect.
		r := results.Record{Step: 3, Target: "far", SentNS: 0, WroteNS: 1, FirstByteNS: int64(i+1) * 10 * msNS}
		if i%2 == 0 {
			r.ConnectNS = 40 * msNS
			r.ConnNS = 40 * msNS
			r.WroteNS = 40 * msNS
			r.FirstByteNS += 40 * msNS
		} else {
			r.ConnReused = true
		}
		r.FirstTokenNS = r.FirstByteNS
		r.LastTokenNS = r.FirstTokenNS + 100*msNS
		recs = append(recs, r)
	}
	recs = append(recs,
		results.Record{Step: 3, Target: "far", Warmup: true, SentNS: 0, FirstByteNS: 9e9, LastTokenNS: 9e9},
		results.Record{Step: 3, Target: "far", ErrorClass: results.ErrTimeout, SentNS: 0, DoneNS: 9e9})
	d := Decompose(recs, map[string]float64{"far": 70})[3]
	if d == nil {
		t.Fatal("no decomposition for step 3")
	}
	if d.Requests != 10 || d.NewConnections != 5 || d.NetworkRTTMS != 70 {
		t.Errorf("requests %d new %d rtt %v, want 10 5 70", d.Requests, d.NewConnections, d.NetworkRTTMS)
	}
	ttfb := d.Part(PartTTFB)
	if math.Abs(ttfb.P50MS-50) > 1e-6 || math.Abs(ttfb.P99MS-100) > 1e-6 {
		t.Errorf("TTFB p50 %v p99 %v, want 50 and 100", ttfb.P50MS, ttfb.P99MS)
	}
	if c := d.Part(PartConnect); c.P50MS != 0 || c.P99MS != 40 || c.MeanMS != 20 {
		t.Errorf("connect %+v, want p50 0 (half the requests reused), p99 40, mean 20", c)
	}
	// Median set-up is 0 (five of ten paid none): the network share of
	// TTFT is the round trip alone.
	if d.TTFTNetworkMS != 70 || d.TTFTServerMS != max(d.TTFTP50MS-70, 0) {
		t.Errorf("TTFT network %v server %v (P50 %v)", d.TTFTNetworkMS, d.TTFTServerMS, d.TTFTP50MS)
	}
}
