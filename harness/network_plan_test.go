package harness

import (
	"strings"
	"testing"
	"time"
)

// TestPlanNetwork: a target's network is a profile's name or figures, a
// profile's figures fill what is left out, and bad input is an error
// naming the field.
func TestPlanNetwork(t *testing.T) {
	t.Parallel()
	const head = "seed: 1\nload: {concurrency: [1], requests: 1}\n" +
		"targets:\n  - {name: a, url: http://127.0.0.1:1, model: m, network: "
	ms := time.Millisecond
	cases := []struct {
		name    string
		network string
		latency time.Duration // one way, after defaults
		down    string
		loss    float64
		wantErr string
	}{
		// Figures from the profile.
		{"profile name", "cross-region", 35 * ms, "1gbit", 0, ""},
		// Loss overridden, the rest from the profile.
		{"profile with override", "{profile: intercontinental, loss: 0.01}", 75 * ms, "1gbit", 0.01, ""},
		// No profile: only what is given.
		{"inline figures", "{latency: 25ms, down_bandwidth: 10mbit}", 25 * ms, "10mbit", 0, ""},
		// An unknown name lists the known ones.
		{"unknown profile", "moon", 0, "", 0, "unknown network profile"},
		// A typo is not silently ignored.
		{"unknown field", "{latncy: 5ms}", 0, "", 0, `unknown field "latncy"`},
		// Not a rate.
		{"bad rate", "{bandwidth: fast}", 0, "", 0, "want a number with a unit"},
		// A probability.
		{"loss out of range", "{loss: 1.5}", 0, "", 0, "loss must be in [0, 1)"},
		// A list is neither form.
		{"not a mapping", "[1, 2]", 0, "", 0, "want a profile name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParsePlan([]byte(head + c.network + "}\n"))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := p.Targets[0].Network
			if n.Latency.D() != c.latency || n.DownBandwidth != c.down || n.Loss != c.loss || !*n.Handshake {
				t.Errorf("network %+v, want latency %v down %s loss %v with the handshake",
					*n, c.latency, c.down, c.loss)
			}
			if _, err := n.Config(1); err != nil {
				t.Error(err)
			}
		})
	}
}

func FuzzParseNetwork(f *testing.F) {
	seeds := []string{"lan", "{profile: mobile-4g, jitter: 5ms}", "{latency: 1ms, loss: 0.5}", "{bandwidth: 1gbit}",
		"[]", "{a: b}"}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNetwork([]byte(s))
		if err != nil {
			return
		}
		n.setDefaults()
		if _, err := n.Config(1); err == nil && n.problem() != "" {
			t.Errorf("%q: Config accepts what problem rejects: %s", s, n.problem())
		}
	})
}
