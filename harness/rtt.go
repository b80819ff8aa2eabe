package harness

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Round-trip probes: TCP connects, timed, with no request on them. A
// connect costs one round trip (SYN out, SYN-ACK back), so its time is the
// network's round trip without load, apart from the server's queue.
const (
	probesBefore = 5 // per target, before the first step
	probesAfter  = 2 // after each step, for the step's target
)

// rttProbes collects each target's probes over a run.
type rttProbes struct {
	t0      time.Time
	timeout time.Duration
	order   []string
	byName  map[string]*results.TargetNetwork
	targets map[string]Target
}

func newRTTProbes(plan *Plan, t0 time.Time) *rttProbes {
	p := &rttProbes{t0: t0, timeout: plan.Timeouts.Connect.D(), byName: map[string]*results.TargetNetwork{},
		targets: map[string]Target{}}
	for _, t := range plan.Targets {
		p.order = append(p.order, t.Name)
		p.byName[t.Name] = &results.TargetNetwork{Target: t.Name, Probes: []results.RTTProbe{}}
		p.targets[t.Name] = t
	}
	return p
}

// all probes every target n times, after step (-1: before the first).
func (p *rttProbes) all(ctx context.Context, step, n int) {
	for _, name := range p.order {
		p.target(ctx, name, step, n)
	}
}

// target probes one target n times in a row.
func (p *rttProbes) target(ctx context.Context, name string, step, n int) {
	tn := p.byName[name]
	if tn == nil {
		return
	}
	for range n {
		if ctx.Err() != nil {
			return
		}
		tn.Probes = append(tn.Probes, p.probe(ctx, p.targets[name], step))
	}
}

// probe times one TCP connect to t: through its emulated link when it has
// one (which makes the connect pay the link's handshake), else to the
// server's address, resolved beforehand so DNS is not counted.
func (p *rttProbes) probe(ctx context.Context, t Target, step int) results.RTTProbe {
	pr := results.RTTProbe{AfterStep: step}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	addr, err := upstreamAddr(t.URL)
	if err == nil && t.link == nil {
		addr, err = resolve(ctx, addr)
	}
	if err != nil {
		pr.AtNS = int64(time.Since(p.t0))
		pr.Error = err.Error()
		return pr
	}
	dial := (&net.Dialer{}).DialContext
	if t.link != nil {
		dial = t.link.DialContext
	}
	start := time.Now()
	pr.AtNS = int64(start.Sub(p.t0))
	c, err := dial(ctx, "tcp", addr)
	took := time.Since(start)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	_ = c.Close()
	pr.RTTMS = float64(took) / 1e6
	return pr
}

// resolve turns host:port into ip:port.
func resolve(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("%s resolves to no address", host)
	}
	return net.JoinHostPort(ips[0], port), nil
}

// result is every target's network entry for run.json, with its median
// round trip and its link's description and counts.
func (p *rttProbes) result(l *links) []results.TargetNetwork {
	out := make([]results.TargetNetwork, 0, len(p.order))
	for _, name := range p.order {
		tn := *p.byName[name]
		var ok []float64
		for _, pr := range tn.Probes {
			if pr.Error == "" {
				ok = append(ok, pr.RTTMS)
			}
		}
		if len(ok) > 0 {
			slices.Sort(ok)
			tn.RTTMS = medianSorted(ok)
		}
		if l != nil {
			tn.Link, tn.LinkStats = l.stats(name)
		}
		out = append(out, tn)
	}
	return out
}

// medianSorted is the median of a sorted, non-empty slice.
func medianSorted(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
