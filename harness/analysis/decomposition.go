package analysis

import "github.com/llm-testbed/testbed/harness/results"

// The parts of a request's end-to-end latency, in the order they happen.
// Each is read from a record's stamps (results.Record), so they add up to
// E2E (t_last − t_send) request by request.
const (
	PartDNS          = "dns"           // name lookup (new connections)
	PartConnect      = "connect"       // TCP connect: one network round trip (new connections)
	PartTLS          = "tls"           // TLS handshake: one or two round trips (new https connections)
	PartConnWait     = "conn_wait"     // the rest of getting a connection: the pool, the transport
	PartRequestWrite = "request_write" // writing the request onto the connection
	// PartTTFB is request written → first response byte: the request's way
	// up, the server's queue and prefill, the first byte's way down.
	PartTTFB          = "ttfb"
	PartFirstTokenGap = "first_token_gap" // first byte → first token (headers or role-only events before text)
	PartDecode        = "decode"          // first token → last token
)

// Parts lists the parts in the order they happen.
var Parts = []string{PartDNS, PartConnect, PartTLS, PartConnWait, PartRequestWrite, PartTTFB, PartFirstTokenGap,
	PartDecode}

// Decomposition is where one step's time went, per part, over its
// measured successful requests, beside the target's measured network round
// trip, so a reader can tell the network's share from the server's.
type Decomposition struct {
	// NetworkRTTMS is the target's round trip without load, measured by the
	// run (run.json's network); 0 when the run did not measure it.
	NetworkRTTMS   float64 `json:"network_rtt_ms"`
	Requests       int     `json:"requests"`
	NewConnections int     `json:"new_connections"` // requests that opened their connection
	Parts          []Part  `json:"parts"`
	// TTFTP50MS is the median TTFT (t_ft − t_send). TTFTNetworkMS is the
	// network's share of it: one round trip (the request's way up and the
	// first byte's way down) plus the median of each request's DNS, connect
	// and TLS time. TTFTServerMS is the rest: queue, prefill and the
	// client, which cannot be told apart from the client's side. Both are 0
	// when the round trip was not measured.
	TTFTP50MS     float64 `json:"ttft_p50_ms"`
	TTFTNetworkMS float64 `json:"ttft_network_ms"`
	TTFTServerMS  float64 `json:"ttft_server_ms"`
}

// Part is one part's distribution over a step's requests, in ms. Requests
// that did not pay a part (a reused connection's connect) count as 0, so
// the means add up to the mean E2E; percentiles do not add up.
type Part struct {
	Name   string  `json:"part"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MeanMS float64 `json:"mean_ms"`
}

// Part returns the named part, or a zero Part.
func (d *Decomposition) Part(name string) Part {
	for _, p := range d.Parts {
		if p.Name == name {
			return p
		}
	}
	return Part{Name: name}
}

// splitRecord is one record's time per part, in ms, in Parts' order, and
// its connection set-up (DNS + connect + TLS).
func splitRecord(r *results.Record) (parts [8]float64, setup float64) {
	sent := r.SentNS
	conn := orAt(r.ConnNS, sent)
	wrote := orAt(r.WroteNS, conn)
	first := orAt(r.FirstByteNS, wrote)
	tok := orAt(r.FirstTokenNS, first)
	last := orAt(r.LastTokenNS, orAt(r.DoneNS, tok))
	net := r.DNSNS + r.ConnectNS + r.TLSNS
	parts[0] = ms(r.DNSNS)
	parts[1] = ms(r.ConnectNS)
	parts[2] = ms(r.TLSNS)
	parts[3] = ms(max(conn-sent-net, 0))
	parts[4] = ms(max(wrote-conn, 0))
	parts[5] = ms(max(first-wrote, 0))
	parts[6] = ms(max(tok-first, 0))
	parts[7] = ms(max(last-tok, 0))
	return parts, ms(net)
}

// orAt is t, or def when the event did not happen (0).
func orAt(t, def int64) int64 {
	if t == 0 {
		return def
	}
	return t
}

// Decompose splits every step's measured successful requests into the
// parts, keyed by step index. rtt is each target's measured round trip in
// ms (results.NetworkRTT), by name.
func Decompose(recs []results.Record, rtt map[string]float64) map[int]*Decomposition {
	type acc struct {
		target string
		parts  [8][]float64
		setup  []float64
		ttft   []float64
		fresh  int
	}
	by := map[int]*acc{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() {
			continue
		}
		a := by[r.Step]
		if a == nil {
			a = &acc{target: r.Target}
			by[r.Step] = a
		}
		parts, setup := splitRecord(r)
		for k, v := range parts {
			a.parts[k] = append(a.parts[k], v)
		}
		a.setup = append(a.setup, setup)
		if r.FirstTokenNS > 0 {
			a.ttft = append(a.ttft, ms(r.FirstTokenNS-r.SentNS))
		}
		if !r.ConnReused {
			a.fresh++
		}
	}
	out := map[int]*Decomposition{}
	for step, a := range by {
		d := &Decomposition{NetworkRTTMS: rtt[a.target], Requests: len(a.setup), NewConnections: a.fresh,
			Parts: make([]Part, len(Parts))}
		for k, name := range Parts {
			v := sortedCopy(a.parts[k])
			d.Parts[k] = Part{Name: name, P50MS: Percentile(v, 50), P99MS: Percentile(v, 99), MeanMS: mean(v)}
		}
		if len(a.ttft) > 0 {
			d.TTFTP50MS = Percentile(sortedCopy(a.ttft), 50)
		}
		if len(a.ttft) > 0 && d.NetworkRTTMS > 0 {
			d.TTFTNetworkMS = d.NetworkRTTMS + Percentile(sortedCopy(a.setup), 50)
			d.TTFTServerMS = max(d.TTFTP50MS-d.TTFTNetworkMS, 0)
		}
		out[step] = d
	}
	return out
}

// AddDecomposition fills each step's Decomposition in a from the records
// and the run's measured network (run.json's network; nil for a run that
// did not measure it).
func AddDecomposition(a *Analysis, recs []results.Record, network []results.TargetNetwork) {
	dec := Decompose(recs, results.NetworkRTT(network))
	for i := range a.Steps {
		a.Steps[i].Decomposition = dec[a.Steps[i].Step]
	}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
