package harness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/llm-testbed/testbed/internal/gamma"
)

// Pacer yields the intended send times of an open-loop step, as offsets
// from the step's start. The runner sleeps until each absolute time and
// starts the request in its own goroutine, so a slow response never delays
// the next send.
type Pacer interface {
	// Next returns the intended offset of the next request.
	Next() time.Duration
}

// Arrival kinds.
const (
	ArrivalConstant = "constant" // evenly spaced
	ArrivalPoisson  = "poisson"  // exponential gaps
	ArrivalGamma    = "gamma"    // gamma gaps; burstiness < 1 is burstier than Poisson, > 1 smoother
)

// NewPacer returns the pacer for rate requests per second with the given
// arrival kind. Burstiness is the gamma shape (1 = Poisson); the mean gap
// stays 1/rate whatever the shape. The same seed gives the same schedule.
func NewPacer(kind string, rate, burstiness float64, seed uint64) (Pacer, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("pacer: rate %v must be a positive number", rate)
	}
	r := rand.New(rand.NewPCG(seed, 0x7e57bed))
	switch kind {
	case ArrivalConstant, "":
		return &constantPacer{gap: 1 / rate}, nil
	case ArrivalPoisson:
		return &gammaPacer{r: r, shape: 1, scale: 1 / rate}, nil
	case ArrivalGamma:
		if !(burstiness > 0) || math.IsInf(burstiness, 0) {
			return nil, fmt.Errorf("pacer: burstiness %v must be positive", burstiness)
		}
		return &gammaPacer{r: r, shape: burstiness, scale: 1 / (rate * burstiness)}, nil
	}
	return nil, fmt.Errorf("pacer: unknown arrival %q (want constant, poisson or gamma)", kind)
}

// NewPacerN is NewPacer for a step of exactly n requests: the n gaps are
// drawn as NewPacer would, then scaled together so they sum to n/rate.
// Scaling exponential gaps by their sum gives exactly a Poisson process
// conditioned on n arrivals in n/rate seconds (the arrival times are then
// sorted uniform draws), and gamma gaps keep their shape; so the achieved
// rate is the rate asked for, not the rate plus the draw's noise (±1/√n).
func NewPacerN(kind string, rate, burstiness float64, seed uint64, n int) (Pacer, error) {
	p, err := NewPacer(kind, rate, burstiness, seed)
	if err != nil || n <= 1 {
		return p, err
	}
	if _, ok := p.(*constantPacer); ok {
		return p, nil
	}
	offs := make([]time.Duration, n+1) // offs[n] ends the last gap
	for i := range offs {
		offs[i] = p.Next()
	}
	// offs[0] is 0; offs[n] is the sum of n gaps.
	scale := (float64(n) / rate) / offs[n].Seconds()
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(offs[i]) * scale)
	}
	return &listPacer{offs: out, gap: time.Duration(float64(time.Second) / rate)}, nil
}

// listPacer replays precomputed offsets, then continues at the mean gap.
type listPacer struct {
	offs []time.Duration
	gap  time.Duration
	i    int
}

func (p *listPacer) Next() time.Duration {
	i := p.i
	p.i++
	if i < len(p.offs) {
		return p.offs[i]
	}
	return p.offs[len(p.offs)-1] + time.Duration(i-len(p.offs)+1)*p.gap
}

type constantPacer struct {
	gap float64 // seconds
	n   int
}

// Next computes i/rate rather than summing gaps, so rounding never drifts.
func (p *constantPacer) Next() time.Duration {
	d := time.Duration(float64(p.n) * p.gap * 1e9)
	p.n++
	return d
}

type gammaPacer struct {
	r            *rand.Rand
	shape, scale float64
	t            float64 // seconds since the step's start
	started      bool
}

// Next returns 0 for the first request, then adds gamma-distributed gaps.
func (p *gammaPacer) Next() time.Duration {
	if p.started {
		if p.shape == 1 {
			p.t += p.r.ExpFloat64() * p.scale
		} else {
			p.t += gamma.Draw(p.r, p.shape) * p.scale
		}
	}
	p.started = true
	return time.Duration(p.t * 1e9)
}
