package netem

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Direction shapes the bytes flowing one way. The zero value passes bytes
// through unchanged.
type Direction struct {
	// Latency is added one way; a request and its response each pay it, so
	// a round trip grows by Latency(up) + Latency(down).
	Latency time.Duration `json:"latency,omitempty"`
	// Jitter adds a uniform offset in [−Jitter, +Jitter] per chunk (seeded);
	// delivery order is kept, so a chunk never overtakes an earlier one.
	Jitter time.Duration `json:"jitter,omitempty"`
	// Bandwidth in bytes per second; 0 means unlimited.
	Bandwidth float64 `json:"bandwidth_bytes_per_s,omitempty"`
	// Burst is the token bucket's depth in bytes: how much may leave at
	// once after an idle spell. 0 paces every byte at Bandwidth.
	Burst int `json:"burst_bytes,omitempty"`
	// StallEvery and StallFor stop the link for StallFor at every multiple
	// of StallEvery after the connection opened.
	StallEvery time.Duration `json:"stall_every,omitempty"`
	StallFor   time.Duration `json:"stall_for,omitempty"`
	// StallProb is the chance per chunk that the link stops for StallFor
	// before sending it.
	StallProb float64 `json:"stall_prob,omitempty"`
	// ResetAfter resets the connection once this many bytes went this way
	// (0 = never); the bytes before it are delivered first.
	ResetAfter int64 `json:"reset_after_bytes,omitempty"`
	// ResetProb is the chance per chunk that the connection is reset
	// before the chunk is delivered.
	ResetProb float64 `json:"reset_prob,omitempty"`
	// Loss is the chance that one TCP segment (SegmentSize bytes) of this
	// direction is lost. TCP delivers it anyway, late: a lost segment
	// followed by at least three more in the same burst is recovered by
	// fast retransmit, one round trip late; otherwise by the retransmission
	// timeout (RTO). The bytes behind it wait for it (head-of-line blocking).
	Loss float64 `json:"loss,omitempty"`
}

// Config shapes a proxy's connections.
type Config struct {
	Up   Direction `json:"up"`   // client → upstream
	Down Direction `json:"down"` // upstream → client
	// Seed makes jitter, random stalls and random resets repeatable: the
	// i-th accepted connection draws from Seed and i.
	Seed int64 `json:"seed"`
	// ChunkSize caps one read (default 32 KiB, lowered to about 2 ms of a
	// direction's bandwidth so pacing stays smooth).
	ChunkSize int `json:"chunk_size,omitempty"`
	// DialTimeout bounds connecting to the upstream (default 10 s).
	DialTimeout time.Duration `json:"dial_timeout,omitempty"`
	// Handshake models TCP's three-way handshake: a new connection's first
	// client bytes leave no earlier than one round trip after it was
	// accepted, as a real client can send only after SYN and SYN-ACK have
	// crossed the link. The client's own connect() still returns at once
	// (the kernel answers the SYN); Proxy.DialContext also makes the
	// client's connect take the round trip, for in-process clients.
	Handshake bool `json:"handshake,omitempty"`
}

// SegmentSize is the TCP payload per segment that Loss counts in: an
// Ethernet MTU of 1500 bytes less 52 bytes of IPv4 and TCP headers with
// timestamps, as Linux sends by default.
const SegmentSize = 1448

// MinRTO is Linux's lower bound on the retransmission timeout's variance
// term (TCP_RTO_MIN, 200 ms); the timeout of a steady connection is
// about the round trip plus this. RFC 6298 asks for at least 1 s; Linux,
// and so most servers, use 200 ms.
const MinRTO = 200 * time.Millisecond

// RTT is the round trip the configuration adds: the latency of both ways.
func (c Config) RTT() time.Duration { return c.Up.Latency + c.Down.Latency }

// RTO is the retransmission timeout a lost segment waits when fast
// retransmit cannot recover it: the round trip plus MinRTO, as Linux
// computes it for a connection with a steady round trip.
func (c Config) RTO() time.Duration { return c.RTT() + MinRTO }

// Symmetric returns a Config applying d both ways.
func Symmetric(d Direction) Config { return Config{Up: d, Down: d} }

// rule is one validation check: it names the field and says what is wrong.
type rule struct {
	field string
	bad   bool
	want  string
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	for _, dir := range []struct {
		name string
		d    Direction
	}{{"up", c.Up}, {"down", c.Down}} {
		d := dir.d
		rules := []rule{
			{"latency", d.Latency < 0, "must not be negative"},
			{"jitter", d.Jitter < 0, "must not be negative"},
			{
				"bandwidth",
				d.Bandwidth < 0 || math.IsNaN(d.Bandwidth) || math.IsInf(d.Bandwidth, 0),
				"must be a finite rate ≥ 0 (0 = unlimited)",
			},
			{"burst", d.Burst < 0, "must not be negative"},
			{"stall_every", d.StallEvery < 0, "must not be negative"},
			{"stall_for", d.StallFor < 0, "must not be negative"},
			{
				"stall_for",
				(d.StallEvery > 0 || d.StallProb > 0) && d.StallFor <= 0,
				"must be positive when stall_every or stall_prob is set",
			},
			{"stall_for", d.StallEvery > 0 && d.StallFor >= d.StallEvery, "must be shorter than stall_every"},
			{"stall_prob", !(d.StallProb >= 0 && d.StallProb <= 1), "must be in [0, 1]"},
			{"reset_after", d.ResetAfter < 0, "must not be negative"},
			{"reset_prob", !(d.ResetProb >= 0 && d.ResetProb <= 1), "must be in [0, 1]"},
			{"loss", !(d.Loss >= 0 && d.Loss < 1), "must be in [0, 1)"},
		}
		for _, r := range rules {
			if r.bad {
				errs = append(errs, fmt.Errorf("netem: %s.%s %s", dir.name, r.field, r.want))
			}
		}
	}
	if c.ChunkSize < 0 {
		errs = append(errs, errors.New("netem: chunk_size must not be negative"))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, errors.New("netem: dial_timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// chunkSize is the read size for direction d.
func (c Config) chunkSize(d Direction) int {
	n := c.ChunkSize
	if n == 0 {
		n = 32 << 10
		if d.Bandwidth > 0 {
			// About 2 ms of the link per chunk, at least one MTU's payload.
			n = min(n, max(1460, int(d.Bandwidth*0.002)))
		}
	}
	return n
}

// rateUnits are tc's rate units (tc(8), "RATES"): bits per second with SI
// prefixes, "bps" meaning bytes per second; a bare number is bytes/s.
var rateUnits = []struct {
	suffix string
	bytes  float64 // bytes per second for 1 unit
}{
	{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8},
	{"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
}

// ParseRate parses a bandwidth as tc writes it — "10mbit", "500kbit",
// "1gbit", "2mbps" (bytes), "125000" (bytes) — into bytes per second.
// "0" and "" mean unlimited.
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" || t == "0" {
		return 0, nil
	}
	mult := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("rate %q: want a number with a unit, like 10mbit, 500kbit or 2mbps (bytes)", s)
	}
	return v * mult, nil
}
