package fit

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Choosing the mode: each candidate (fixed, engine, load_curve) is fitted
// on some steps of the run and replayed, in virtual time through the
// mock's own scheduler (engine.Simulate), on the steps it was not fitted
// on, with the same requests (prompt and output lengths) and the same load
// (the closed loop's concurrency, or the open loop's send times). Its error
// is the mean, over the held-out steps and the four figures TTFT p50, TTFT
// p99, ITL p50 and ITL p99, of |predicted − measured| / measured. The
// held-out steps are every other step of the ladder in order, the last
// excepted, so each candidate is judged between loads it saw (a run of one
// or two steps is scored on the steps it was fitted on, and says so).
// The lowest error wins, except that the engine model is taken when it is
// within tieMargin of it: it explains queueing and batch caps beyond the
// loads measured. Fixed and load_curve get no such margin: a ladder's
// held-out steps may lie close to its least-loaded one, where a fixed
// profile looks almost as good as a curve that also follows the load.

// tieMargin is how much more held-out error the engine model may have.
const tieMargin = 0.05

// candidateModes are scored in this order (and printed in it).
var candidateModes = []string{engine.ModeEngine, engine.ModeFixed, engine.ModeLoadCurve}

// Candidate is one mode's held-out score.
type Candidate struct {
	Mode string
	// Err is the mean relative error over the held-out steps (0.05 = 5 %);
	// NaN when the mode was not scored (Why says why).
	Err   float64
	Why   string
	Steps []StepScore
}

// StepScore is one held-out step's figures, in ms: TTFT p50, TTFT p99,
// ITL p50, ITL p99.
type StepScore struct {
	Level               string
	Measured, Predicted [4]float64
}

// Choice is how the mode was chosen.
type Choice struct {
	Fitted, HeldOut []string // step labels
	InSample        bool     // too few steps to hold any out
	Candidates      []Candidate
	Mode            string
	Reason          string
}

// stepRecs is one step's records in send order.
type stepRecs struct {
	step  int
	label string
	recs  []results.Record
}

// splitSteps groups records by step, in step order.
func splitSteps(recs []results.Record) []stepRecs {
	by := map[int][]results.Record{}
	for _, r := range recs {
		by[r.Step] = append(by[r.Step], r)
	}
	var out []stepRecs
	for _, k := range slices.Sorted(maps.Keys(by)) {
		rs := by[k]
		slices.SortFunc(rs, func(a, b results.Record) int { return int(a.SentNS - b.SentNS) })
		label := results.LoadLabel(rs[0].Concurrency, rs[0].Rate)
		out = append(out, stepRecs{step: k, label: label, recs: rs})
	}
	return out
}

// holdOut splits the steps: every other one, the last excepted, is held out.
func holdOut(steps []stepRecs) (fitted, held []stepRecs) {
	for i, s := range steps {
		if i%2 == 1 && i != len(steps)-1 {
			held = append(held, s)
		} else {
			fitted = append(fitted, s)
		}
	}
	return fitted, held
}

func concat(steps []stepRecs) []results.Record {
	var out []results.Record
	for _, s := range steps {
		out = append(out, s.recs...)
	}
	return out
}

// choose scores the candidates built from the fitted steps and picks the
// mode. engineOK says whether the full engine fit passed its gates.
func choose(recs []results.Record, cfg config, engineOK bool, engineWhy string) (*Choice, error) {
	steps := splitSteps(recs)
	fitted, held := holdOut(steps)
	ch := &Choice{}
	if len(held) == 0 {
		fitted, held, ch.InSample = steps, steps, true
	}
	for _, s := range fitted {
		ch.Fitted = append(ch.Fitted, s.label)
	}
	for _, s := range held {
		ch.HeldOut = append(ch.HeldOut, s.label)
	}
	train := concat(fitted)
	for _, mode := range candidateModes {
		c := Candidate{Mode: mode, Err: math.NaN()}
		p, err := candidateProfile(mode, train, cfg)
		switch {
		case mode == engine.ModeEngine && !engineOK:
			c.Why = engineWhy
		case err != nil:
			c.Why = err.Error()
		default:
			c.Err, c.Steps, err = score(p, held)
			if err != nil {
				c.Err, c.Why = math.NaN(), err.Error()
			}
		}
		ch.Candidates = append(ch.Candidates, c)
	}
	best := -1
	for i, c := range ch.Candidates {
		if !math.IsNaN(c.Err) && (best < 0 || c.Err < ch.Candidates[best].Err) {
			best = i
		}
	}
	if best < 0 {
		return ch, fmt.Errorf("no mode could be scored")
	}
	b := ch.Candidates[best]
	ch.Mode = b.Mode
	ch.Reason = fmt.Sprintf("lowest held-out error (%.1f%%)", 100*b.Err)
	if e := ch.Candidates[0]; e.Mode == engine.ModeEngine && b.Mode != e.Mode && !math.IsNaN(e.Err) &&
		e.Err <= b.Err+tieMargin {
		ch.Mode = e.Mode
		ch.Reason = fmt.Sprintf("held-out error %.1f%%, within %.0f points of the lowest (%s, %.1f%%), "+
			"and the step model explains queueing beyond the loads measured", 100*e.Err, 100*tieMargin, b.Mode,
			100*b.Err)
	}
	return ch, nil
}

// candidateProfile fits mode on recs.
func candidateProfile(mode string, recs []results.Record, cfg config) (engine.Profile, error) {
	p := cfg.base
	p.Name = "candidate"
	p.Mode = mode
	switch mode {
	case engine.ModeFixed:
		f, err := fitFixed(recs)
		if err != nil {
			return p, err
		}
		setFixed(&p, f)
	case engine.ModeEngine:
		e, err := fitEngine(recs, cfg.gapNS)
		if err != nil {
			return p, err
		}
		setEngine(&p, e)
	case engine.ModeLoadCurve:
		lc, err := fitLoadCurve(recs)
		if err != nil {
			return p, err
		}
		p.LoadCurve = lc.Curve
	}
	return p, p.Validate()
}

// score replays each held-out step against p and returns the mean error.
func score(p engine.Profile, held []stepRecs) (float64, []StepScore, error) {
	var sum float64
	var out []StepScore
	for _, s := range held {
		meas, ok := measure(s.recs, nil)
		if !ok {
			continue
		}
		sim, err := engine.Simulate(p, simLoad(s.recs), engine.WithSeed(1))
		if err != nil {
			return 0, nil, err
		}
		pred, _ := measure(s.recs, sim)
		var e float64
		for i := range meas {
			e += math.Abs(pred[i]-meas[i]) / math.Max(meas[i], 1e-6)
		}
		sum += e / float64(len(meas))
		out = append(out, StepScore{Level: s.label, Measured: meas, Predicted: pred})
	}
	if len(out) == 0 {
		return 0, nil, fmt.Errorf("no held-out step has measured latencies")
	}
	return sum / float64(len(out)), out, nil
}

// simLoad is the load of one step as it was sent.
func simLoad(recs []results.Record) engine.SimLoad {
	load := engine.SimLoad{Concurrency: recs[0].Concurrency}
	t0 := recs[0].IntendedNS
	for _, r := range recs {
		t0 = min(t0, r.IntendedNS)
	}
	for _, r := range recs {
		n := r.NOut
		if n <= 0 || !r.OK() {
			n = r.NOutCounted
		}
		load.Requests = append(load.Requests, engine.SimRequest{
			Request: engine.Request{PromptTokens: max(r.NIn, 1), OutputTokens: max(n, 1)},
			At:      timeNS(r.IntendedNS - t0),
		})
	}
	return load
}

// measure returns TTFT p50, p99 and ITL p50, p99 in ms of the usable
// records, from the records themselves or, when sim is given, from the
// simulated requests in their place.
func measure(recs []results.Record, sim []engine.SimResult) ([4]float64, bool) {
	var ttft, itl []float64
	for i := range recs {
		r := &recs[i]
		if !usable(r) || !r.Stream {
			continue
		}
		if sim != nil {
			ttft = append(ttft, float64(sim[i].TTFT))
			for _, g := range sim[i].Gaps {
				itl = append(itl, float64(g))
			}
			continue
		}
		ttft = append(ttft, float64(r.FirstTokenNS-r.SentNS))
		tokenGaps(r, func(_ int64, g float64) { itl = append(itl, g) })
	}
	if len(ttft) == 0 || len(itl) == 0 {
		return [4]float64{}, false
	}
	return [4]float64{
		analysis.Quantile(ttft, 0.5) / 1e6, analysis.Quantile(ttft, 0.99) / 1e6,
		analysis.Quantile(itl, 0.5) / 1e6, analysis.Quantile(itl, 0.99) / 1e6,
	}, true
}

// print writes how the mode was chosen.
func (ch *Choice) print(w io.Writer) {
	if ch.InSample {
		fmt.Fprintf(w, "choice: too few steps to hold any out; each mode scored on the steps it was fitted on (%s)\n",
			strings.Join(ch.HeldOut, ", "))
	} else {
		fmt.Fprintf(w, "choice: each mode fitted on %s and replayed on held-out %s; "+
			"error = mean |predicted − measured| / measured of TTFT and ITL p50 and p99\n",
			strings.Join(ch.Fitted, ", "), strings.Join(ch.HeldOut, ", "))
	}
	for _, c := range ch.Candidates {
		if math.IsNaN(c.Err) {
			fmt.Fprintf(w, "  %-10s not scored: %s\n", c.Mode, c.Why)
			continue
		}
		fmt.Fprintf(w, "  %-10s %5.1f%%", c.Mode, 100*c.Err)
		for _, s := range c.Steps {
			fmt.Fprintf(w, "   %s: TTFT p50 %.1f→%.1f p99 %.1f→%.1f, ITL p50 %.2f→%.2f p99 %.2f→%.2f ms",
				s.Level, s.Measured[0], s.Predicted[0], s.Measured[1], s.Predicted[1],
				s.Measured[2], s.Predicted[2], s.Measured[3], s.Predicted[3])
		}
		fmt.Fprintln(w)
	}
	if ch.Mode != "" {
		fmt.Fprintf(w, "  chose %s: %s\n", ch.Mode, ch.Reason)
	}
}
