// Package netem puts network conditions between a load client and a server,
// in user space: a TCP proxy that shapes each direction of every connection
// with added latency (fixed plus seeded jitter), a bandwidth limit (token
// bucket), periodic or random stalls, and connection resets after a number
// of bytes or with a probability.
//
// Why user space: the kernel's sch_netem module is missing on many CI and
// container hosts (this project's machines among them), so `tc qdisc ...
// netem` fails there; a proxy works anywhere the client can be pointed at a
// different address.
//
// How a byte is delayed: each direction reads chunks from its source, and
// each chunk gets an absolute delivery time when it is read —
//
//	depart  = token-bucket departure of its last byte (bandwidth), pushed
//	          past any stall window
//	deliver = max(depart + latency ± jitter, previous chunk's deliver)
//
// — and a writer goroutine writes it at that time. Because every time is
// computed from the moment of reading, not by sleeping a relative amount
// per chunk, latency and bandwidth compose (a 1 MB response over 10 Mbit/s
// with 50 ms latency arrives ≈ 0.8 s + 50 ms after it was sent, not
// n·50 ms), delays do not drift, and bytes are never reordered.
//
// Loss is modelled as TCP experiences it: a lost segment is not dropped
// but delivered late, by one round trip (fast retransmit) or by the
// retransmission timeout, with everything behind it waiting (loss in
// shape.go). A new connection's TCP handshake is modelled with
// Config.Handshake: the first client bytes wait one round trip, and
// Proxy.DialContext makes an in-process client's connect take it too.
// Named links with their sources are in profile.go (Profiles).
//
// The timing is as precise as the Go runtime's timers (sub-millisecond on
// a busy process, up to about a millisecond late on an idle one).
package netem
