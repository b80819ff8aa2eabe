package harness

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/netem"
	"gopkg.in/yaml.v3"
)

// Network is the emulated link in front of a target (`network:` in a plan,
// `--netem` on bench): Run starts netem's shaping proxy in-process on
// loopback and the target's requests cross it. In YAML it is a profile's
// name (`network: cross-region`) or figures, optionally starting from a
// profile:
//
//	network: {profile: cross-region, loss: 0.01}
//	network: {latency: 25ms, jitter: 1ms, bandwidth: 50mbit}
//
// A figure left out takes the profile's value (or none without a profile).
// SetDefaults writes the profile's figures into the fields, so run.json
// says what the link was.
type Network struct {
	Profile       string   `yaml:"profile,omitempty"        json:"profile,omitempty"`
	Latency       Duration `yaml:"latency,omitempty"        json:"latency"` // one way, each direction
	Jitter        Duration `yaml:"jitter,omitempty"         json:"jitter,omitempty"`
	Bandwidth     string   `yaml:"bandwidth,omitempty"      json:"bandwidth,omitempty"` // each way, tc units: 10mbit
	UpBandwidth   string   `yaml:"up_bandwidth,omitempty"   json:"up_bandwidth,omitempty"`
	DownBandwidth string   `yaml:"down_bandwidth,omitempty" json:"down_bandwidth,omitempty"`
	Loss          float64  `yaml:"loss,omitempty"           json:"loss,omitempty"`      // per TCP segment, each direction
	UpLoss        float64  `yaml:"up_loss,omitempty"        json:"up_loss,omitempty"`   // client → server, overrides loss
	DownLoss      float64  `yaml:"down_loss,omitempty"      json:"down_loss,omitempty"` // server → client, overrides loss
	// Handshake makes a new connection pay TCP's handshake round trip
	// (default true).
	Handshake  *bool    `yaml:"handshake,omitempty"      json:"handshake"`
	StallEvery Duration `yaml:"stall_every,omitempty"    json:"stall_every,omitempty"`
	StallFor   Duration `yaml:"stall_for,omitempty"      json:"stall_for,omitempty"`
	StallProb  float64  `yaml:"stall_prob,omitempty"     json:"stall_prob,omitempty"`
	// ResetAfter and ResetProb reset connections by the bytes of the
	// response (server → client): a mid-stream disconnect.
	ResetAfter int64   `yaml:"reset_after,omitempty"    json:"reset_after,omitempty"`
	ResetProb  float64 `yaml:"reset_prob,omitempty"     json:"reset_prob,omitempty"`
}

// networkFields are the keys a network mapping may hold.
var networkFields = []string{"profile", "latency", "jitter", "bandwidth", "up_bandwidth", "down_bandwidth",
	"loss", "up_loss", "down_loss",
	"handshake", "stall_every", "stall_for", "stall_prob", "reset_after", "reset_prob"}

// UnmarshalYAML reads a profile's name or a mapping of figures; an unknown
// key is an error, as everywhere in a plan.
func (n *Network) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		*n = Network{Profile: strings.TrimSpace(node.Value)}
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: network: want a profile name (%s) or a mapping of figures",
			node.Line, strings.Join(netem.ProfileNames(), ", "))
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if k := node.Content[i]; !slices.Contains(networkFields, k.Value) {
			return fmt.Errorf("line %d: network: unknown field %q (known: %s)",
				k.Line, k.Value, strings.Join(networkFields, ", "))
		}
	}
	type plain Network // without this method, so Decode does not recurse
	var p plain
	if err := node.Decode(&p); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	*n = Network(p)
	return nil
}

// ParseNetwork reads a network from YAML text: a profile's name or a
// mapping of figures, as under `network:` in a plan.
func ParseNetwork(b []byte) (Network, error) {
	var n Network
	if err := yaml.Unmarshal(b, &n); err != nil {
		return Network{}, fmt.Errorf("network: %w", err)
	}
	return n, nil
}

// LoadNetwork resolves what a user typed after --netem: a profile's name,
// else a YAML file holding a network.
func LoadNetwork(arg string) (Network, error) {
	if _, err := netem.LookupProfile(arg); err == nil {
		return Network{Profile: arg}, nil
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return Network{}, fmt.Errorf("network %q is neither a profile (%s) nor a readable file: %w",
			arg, strings.Join(netem.ProfileNames(), ", "), err)
	}
	n, err := ParseNetwork(b)
	if err != nil {
		return Network{}, fmt.Errorf("%s: %w", arg, err)
	}
	return n, nil
}

// setDefaults fills the figures the network leaves out from its profile.
func (n *Network) setDefaults() {
	if n.Handshake == nil {
		t := true
		n.Handshake = &t
	}
	pr, err := netem.LookupProfile(n.Profile)
	if n.Profile == "" || err != nil {
		return // no profile, or a bad name Validate reports
	}
	if n.Latency == 0 {
		n.Latency = Duration(pr.Latency)
	}
	if n.Jitter == 0 {
		n.Jitter = Duration(pr.Jitter)
	}
	if n.Bandwidth == "" && n.DownBandwidth == "" && pr.Down > 0 {
		n.DownBandwidth = netem.FormatRate(pr.Down)
	}
	if n.Bandwidth == "" && n.UpBandwidth == "" && pr.Up > 0 {
		n.UpBandwidth = netem.FormatRate(pr.Up)
	}
	if n.Loss == 0 {
		n.Loss = pr.Loss
	}
}

// Config is the proxy configuration the network stands for, seeded.
func (n Network) Config(seed int64) (netem.Config, error) {
	var errs []error
	rate := func(field, v string) float64 {
		r, err := netem.ParseRate(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		return r
	}
	if n.Profile != "" {
		if _, err := netem.LookupProfile(n.Profile); err != nil {
			errs = append(errs, err)
		}
	}
	bw := rate("bandwidth", n.Bandwidth)
	d := netem.Direction{Latency: n.Latency.D(), Jitter: n.Jitter.D(), Bandwidth: bw, Loss: n.Loss,
		StallEvery: n.StallEvery.D(), StallFor: n.StallFor.D(), StallProb: n.StallProb}
	if d.Bandwidth > 0 {
		d.Burst = 10 * netem.SegmentSize
	}
	c := netem.Config{Up: d, Down: d, Seed: seed, Handshake: n.Handshake == nil || *n.Handshake}
	if n.UpBandwidth != "" {
		c.Up.Bandwidth = rate("up_bandwidth", n.UpBandwidth)
		c.Up.Burst = 10 * netem.SegmentSize
	}
	if n.DownBandwidth != "" {
		c.Down.Bandwidth = rate("down_bandwidth", n.DownBandwidth)
		c.Down.Burst = 10 * netem.SegmentSize
	}
	if n.UpLoss != 0 {
		c.Up.Loss = n.UpLoss
	}
	if n.DownLoss != 0 {
		c.Down.Loss = n.DownLoss
	}
	c.Down.ResetAfter, c.Down.ResetProb = n.ResetAfter, n.ResetProb
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// problem is what is wrong with the network, or "".
func (n *Network) problem() string {
	if n == nil {
		return ""
	}
	if _, err := n.Config(0); err != nil {
		return strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return ""
}

// upstreamAddr is host:port of a target's URL, with the scheme's port
// when the URL has none.
func upstreamAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// links are the proxies Run started, one per target with a network.
type links struct {
	proxies map[string]*netem.Proxy // by target name
	configs map[string]netem.Config
}

// startLinks starts a shaping proxy on loopback for every target with a
// network and points the target's connections at it. Each target's link
// is seeded from the plan's seed and its place in the plan.
func startLinks(plan *Plan) (*links, error) {
	l := &links{proxies: map[string]*netem.Proxy{}, configs: map[string]netem.Config{}}
	for i := range plan.Targets {
		t := &plan.Targets[i]
		if t.Network == nil {
			continue
		}
		up, err := upstreamAddr(t.URL)
		if err != nil {
			return nil, errors.Join(err, l.close())
		}
		cfg, err := t.Network.Config(plan.Seed*1_000_003 + int64(i))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("plan: targets[%d].network: %w", i, err), l.close())
		}
		p, err := netem.New(up, cfg)
		if err != nil {
			return nil, errors.Join(err, l.close())
		}
		if err := p.Listen("127.0.0.1:0"); err != nil {
			return nil, errors.Join(err, l.close())
		}
		l.proxies[t.Name] = p
		l.configs[t.Name] = cfg
		t.link = p
	}
	return l, nil
}

// stats returns each link's description and counts, by target.
func (l *links) stats(name string) (string, *results.LinkStats) {
	p := l.proxies[name]
	if p == nil {
		return "", nil
	}
	st := p.Stats()
	return l.configs[name].Describe(), &results.LinkStats{
		Connections: st.Accepted, BytesUp: st.BytesUp, BytesDown: st.BytesDown, Resets: st.Resets,
		Stalls: st.Stalls, Losses: st.Losses, RTOs: st.RTOs, Chunks: st.Chunks, Late1ms: st.Late1ms,
		MaxLateMS: float64(st.MaxLateNS) / 1e6,
	}
}

// close stops every proxy.
func (l *links) close() error {
	var errs []error
	for _, p := range l.proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
