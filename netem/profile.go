package netem

import (
	"fmt"
	"strings"
	"time"
)

// Profile is a named kind of link with typical figures. docs/netem.md
// gives each figure's public source.
type Profile struct {
	Name string
	// Summary says what the link stands for, for help texts and reports.
	Summary string
	// Latency is one way, each direction; the round trip is twice it.
	Latency time.Duration
	// Jitter is the ± spread per chunk around Latency.
	Jitter time.Duration
	// Down and Up are the bandwidths in bytes per second (0 = unlimited).
	Down, Up float64
	// Loss is the chance per TCP segment, each direction.
	Loss float64
}

// Profiles are the named links, from the nearest to the farthest.
var Profiles = []Profile{
	{Name: "lan", Summary: "client and server on one switched LAN (RTT 0.2 ms, 1 Gbit/s)",
		Latency: 100 * time.Microsecond, Down: 1e9 / 8, Up: 1e9 / 8},
	{Name: "same-region", Summary: "another zone of the same cloud region (RTT 2 ms, 10 Gbit/s)",
		Latency: time.Millisecond, Jitter: 100 * time.Microsecond, Down: 10e9 / 8, Up: 10e9 / 8},
	{Name: "cross-region", Summary: "another region on the same continent (RTT 70 ms, 1 Gbit/s)",
		Latency: 35 * time.Millisecond, Jitter: time.Millisecond, Down: 1e9 / 8, Up: 1e9 / 8},
	{Name: "intercontinental", Summary: "a region on another continent (RTT 150 ms, 1 Gbit/s, 0.1 % loss)",
		Latency: 75 * time.Millisecond, Jitter: 2 * time.Millisecond, Down: 1e9 / 8, Up: 1e9 / 8, Loss: 0.001},
	{Name: "mobile-4g", Summary: "a slow 4G phone (RTT 150 ms, 1.6 Mbit/s down, 750 kbit/s up)",
		Latency: 75 * time.Millisecond, Down: 1.6e6 / 8, Up: 750e3 / 8},
}

// LookupProfile returns the named profile; an unknown name is an error
// listing the known ones.
func LookupProfile(name string) (Profile, error) {
	for _, p := range Profiles {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("netem: unknown network profile %q: want one of %s",
		name, strings.Join(ProfileNames(), ", "))
}

// ProfileNames lists the profiles' names in their order.
func ProfileNames() []string {
	out := make([]string, len(Profiles))
	for i, p := range Profiles {
		out[i] = p.Name
	}
	return out
}

// Config is the proxy configuration for the profile: its figures in both
// directions, the handshake modelled, seeded with seed.
func (p Profile) Config(seed int64) Config {
	c := Config{
		Up:        Direction{Latency: p.Latency, Jitter: p.Jitter, Bandwidth: p.Up, Loss: p.Loss},
		Down:      Direction{Latency: p.Latency, Jitter: p.Jitter, Bandwidth: p.Down, Loss: p.Loss},
		Seed:      seed,
		Handshake: true,
	}
	if p.Up > 0 || p.Down > 0 {
		// A bucket of ten segments: a link passes a short burst at line
		// rate instead of pacing every byte of a small request.
		c.Up.Burst, c.Down.Burst = 10*SegmentSize, 10*SegmentSize
	}
	return c
}

// Describe is a one-line account of a configuration, e.g. "RTT 70 ms
// (35 ms each way ± 1 ms), 125 MB/s down, 125 MB/s up, loss 0.1 %".
func (c Config) Describe() string {
	parts := []string{fmt.Sprintf("RTT %v", c.RTT())}
	if c.Up.Latency == c.Down.Latency && c.Up.Jitter == c.Down.Jitter && c.Up.Jitter > 0 {
		parts[0] += fmt.Sprintf(" (± %v each way)", c.Up.Jitter)
	}
	for _, d := range []struct {
		name string
		bw   float64
	}{{"down", c.Down.Bandwidth}, {"up", c.Up.Bandwidth}} {
		if d.bw > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", FormatRate(d.bw), d.name))
		}
	}
	if c.Down.Loss > 0 || c.Up.Loss > 0 {
		parts = append(parts, fmt.Sprintf("loss %g %% down, %g %% up per segment", c.Down.Loss*100, c.Up.Loss*100))
	}
	if c.Handshake {
		parts = append(parts, "handshake modelled")
	}
	return strings.Join(parts, ", ")
}

// FormatRate writes bytes per second in tc's bit units, the way ParseRate
// reads them: "10mbit", "1.6mbit", "750kbit".
func FormatRate(bytesPerS float64) string {
	bits := bytesPerS * 8
	units := []struct {
		suffix string
		v      float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}}
	for _, u := range units {
		if bits >= u.v {
			return fmt.Sprintf("%g%s", bits/u.v, u.suffix)
		}
	}
	return fmt.Sprintf("%gbit", bits)
}
