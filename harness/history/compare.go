package history

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/llm-testbed/testbed/internal/gamma"
)

// Verdicts of a comparison.
const (
	Improved  = "improved"
	Unchanged = "unchanged"
	Regressed = "regressed"
	NotJudged = "not judged" // too few samples, or the metric is absent in one run
)

// Rules decide what counts as a regression.
type Rules struct {
	// Metrics to judge, e.g. "ttft_p50"; all latencies (higher is worse).
	Metrics []string
	// MinEffect is the smallest relative change that counts (0.05 = 5 %):
	// a change must be both this large and statistically clear.
	MinEffect float64
	// Confidence of the intervals, e.g. 0.99.
	Confidence float64
	// MinSamples: a step with fewer samples of a metric in either run is
	// not judged on it.
	MinSamples int64
	// Resamples is the number of bootstrap replicates.
	Resamples int
}

// DefaultRules judge the median and p90 of TTFT and E2E and the medians
// of ITL and TPOT; a change must exceed 5 % with 99 % confidence. Run-to-
// run noise on a quiet machine is well under that, and the tails beyond
// p90 are left out of the defaults: with a few hundred requests a step,
// p99 rests on a handful of samples.
func DefaultRules() Rules {
	return Rules{
		Metrics:    []string{"ttft_p50", "ttft_p90", "itl_p50", "tpot_p50", "e2e_p50", "e2e_p90"},
		MinEffect:  0.05,
		Confidence: 0.99,
		MinSamples: 10,
		Resamples:  2000,
	}
}

// Validate checks the rules.
func (r Rules) Validate() error {
	if len(r.Metrics) == 0 {
		return fmt.Errorf("rules: no metric to compare")
	}
	for _, m := range r.Metrics {
		spec, err := ParseMetric(m)
		if err != nil {
			return err
		}
		if spec.Rate != "" {
			return fmt.Errorf("rules: %s is a per-step rate with no per-request samples; compare latencies", m)
		}
	}
	switch {
	case !(r.MinEffect >= 0 && r.MinEffect < 10):
		return fmt.Errorf("rules: minimum effect %g: want a share such as 0.05 (5 %%)", r.MinEffect)
	case !(r.Confidence > 0.5 && r.Confidence < 1):
		return fmt.Errorf("rules: confidence %g: want a value between 0.5 and 1, e.g. 0.99", r.Confidence)
	case r.Resamples < 100:
		return fmt.Errorf("rules: %d resamples: want at least 100", r.Resamples)
	}
	return nil
}

// ParseShare reads a share as people type it: "5%" or "0.05".
func ParseShare(s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q: want a share such as 5%% or 0.05", s)
	}
	if pct {
		v /= 100
	}
	return v, nil
}

// Change is one metric of one step, base against new.
type Change struct {
	Metric    string
	Base, New float64 // the metric's value in each run
	// Rel is the relative change (New/Base − 1); Lo and Hi bound it at
	// the rules' confidence.
	Rel, Lo, Hi   float64
	NBase, NNew   int64 // samples behind each value
	Verdict       string
	NotJudgedWhy  string
	HigherIsWorse bool
}

// StepComparison is one step present in both runs.
type StepComparison struct {
	Label   string
	Changes []Change
}

// Comparison is the result of Compare.
type Comparison struct {
	BaseID, NewID string
	Rules         Rules
	Steps         []StepComparison
	Unmatched     []string // steps in only one of the runs
	Notes         []string // e.g. the runs' fingerprints differ
}

// Regressions lists "metric at step" for every regressed metric.
func (c *Comparison) Regressions() []string {
	var out []string
	for _, s := range c.Steps {
		for _, ch := range s.Changes {
			if ch.Verdict == Regressed {
				out = append(out, fmt.Sprintf("%s at %s (%+.1f %%)", ch.Metric, s.Label, 100*ch.Rel))
			}
		}
	}
	return out
}

// Compare judges new against base, step by step: each step of new is
// matched to base's step with the same target, scenario and load, and
// each metric's relative change gets a bootstrap confidence interval from
// the two runs' histograms.
func Compare(base, cur *Run, rules Rules) (*Comparison, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	specs := make([]MetricSpec, len(rules.Metrics))
	for i, m := range rules.Metrics {
		specs[i], _ = ParseMetric(m) // validated
	}
	c := &Comparison{BaseID: base.ID, NewID: cur.ID, Rules: rules}
	if base.Fingerprint.Hash != cur.Fingerprint.Hash {
		c.Notes = append(
			c.Notes,
			fmt.Sprintf("the runs' fingerprints differ (%s, %s): plans or setups are not the same",
				base.Fingerprint.Hash, cur.Fingerprint.Hash),
		)
	}
	for _, st := range []string{base.Status, cur.Status} {
		if st != StatusComplete {
			c.Notes = append(c.Notes, "a run is "+st+": its steps may be short")
		}
	}
	baseSteps := map[string][]*Step{}
	for i := range base.Steps {
		l := base.Steps[i].Label()
		baseSteps[l] = append(baseSteps[l], &base.Steps[i])
	}
	rng := rand.New(rand.NewPCG(1, 2)) // fixed: the same runs always give the same intervals
	for i := range cur.Steps {
		ns := &cur.Steps[i]
		l := ns.Label()
		if len(baseSteps[l]) == 0 {
			c.Unmatched = append(c.Unmatched, l+" (only in "+cur.ID+")")
			continue
		}
		bs := baseSteps[l][0]
		baseSteps[l] = baseSteps[l][1:]
		sc := StepComparison{Label: l}
		for _, spec := range specs {
			sc.Changes = append(sc.Changes, compareMetric(rng, spec, bs, ns, rules))
		}
		c.Steps = append(c.Steps, sc)
	}
	var left []string
	for l, v := range baseSteps {
		for range v {
			left = append(left, l+" (only in "+base.ID+")")
		}
	}
	sort.Strings(left)
	c.Unmatched = append(c.Unmatched, left...)
	return c, nil
}

// compareMetric bootstraps one metric's relative change.
func compareMetric(rng *rand.Rand, spec MetricSpec, bs, ns *Step, rules Rules) Change {
	ch := Change{Metric: spec.Name, Verdict: NotJudged, HigherIsWorse: true}
	hb := bs.Histograms.Metrics[spec.Hist]
	hn := ns.Histograms.Metrics[spec.Hist]
	if hb == nil || hn == nil || hb.Count() == 0 || hn.Count() == 0 {
		ch.NotJudgedWhy = "no samples in one of the runs"
		ch.Base, ch.New = math.NaN(), math.NaN()
		return ch
	}
	ch.Base, _ = spec.Value(bs)
	ch.New, _ = spec.Value(ns)
	ch.NBase, ch.NNew = hb.Count(), hn.Count()
	ch.Rel = ch.New/ch.Base - 1
	// Tokens of one request are not independent: resample as many values
	// as there were requests, not tokens, or the interval is too narrow.
	nb, nn := ch.NBase, ch.NNew
	if spec.PerToken {
		nb, nn = min(nb, int64(max(bs.Summary.OK, 1))), min(nn, int64(max(ns.Summary.OK, 1)))
	}
	if nb < rules.MinSamples || nn < rules.MinSamples || !(ch.Base > 0) {
		ch.NotJudgedWhy = fmt.Sprintf("fewer than %d samples", rules.MinSamples)
		return ch
	}
	db := newResampler(hb.Buckets())
	dn := newResampler(hn.Buckets())
	sb, sn := hb.Stats(), hn.Stats()
	rel := make([]float64, rules.Resamples)
	for i := range rel {
		var b, n float64
		if spec.Quantile < 0 {
			// The bootstrap distribution of a mean is normal to a close
			// approximation at these sample sizes.
			b = sb.Mean + rng.NormFloat64()*sb.Stddev/math.Sqrt(float64(nb))
			n = sn.Mean + rng.NormFloat64()*sn.Stddev/math.Sqrt(float64(nn))
		} else {
			b = db.quantile(rng, spec.Quantile/100, nb)
			n = dn.quantile(rng, spec.Quantile/100, nn)
		}
		rel[i] = n/b - 1
	}
	sort.Float64s(rel)
	alpha := (1 - rules.Confidence) / 2
	ch.Lo = rel[int(math.Floor(alpha*float64(len(rel)-1)))]
	ch.Hi = rel[int(math.Ceil((1-alpha)*float64(len(rel)-1)))]
	ch.Verdict = verdict(ch, rules.MinEffect)
	return ch
}

// verdict: a change counts when its interval excludes no change AND its
// size reaches the minimum effect; anything else is noise or too small
// to matter.
func verdict(ch Change, minEffect float64) string {
	worse, better := ch.Lo > 0 && ch.Rel >= minEffect, ch.Hi < 0 && ch.Rel <= -minEffect
	if !ch.HigherIsWorse {
		worse, better = better, worse
	}
	switch {
	case worse:
		return Regressed
	case better:
		return Improved
	}
	return Unchanged
}

// resampler draws bootstrap replicates of a quantile from a histogram.
// The q-quantile of n values drawn with replacement from a distribution
// F is F⁻¹(U₍k₎), k = ⌈qn⌉, where U₍k₎, the k-th smallest of n uniforms,
// is Beta(k, n−k+1): one Beta draw per replicate instead of n draws and
// a sort, so a replicate costs the same for ten samples or a million.
type resampler struct {
	vals []float64
	cum  []int64
}

func newResampler(vals []float64, cum []int64) resampler { return resampler{vals: vals, cum: cum} }

func (r resampler) quantile(rng *rand.Rand, q float64, n int64) float64 {
	k := math.Max(1, math.Ceil(q*float64(n)))
	g1 := gamma.Draw(rng, k)
	g2 := gamma.Draw(rng, float64(n)-k+1)
	u := g1 / (g1 + g2)
	total := r.cum[len(r.cum)-1]
	rank := int64(math.Ceil(u * float64(total)))
	rank = max(1, min(total, rank))
	i := sort.Search(len(r.cum), func(i int) bool { return r.cum[i] >= rank })
	return r.vals[i]
}

// WriteTable prints the comparison: one line per step and metric, then
// the verdict.
func (c *Comparison) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "base %s → new %s: change of each metric with its %g %% interval; a change counts past %g %%\n\n",
		c.BaseID, c.NewID, 100*c.Rules.Confidence, 100*c.Rules.MinEffect)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmetric\tbase\tnew\tchange\tinterval\tverdict\t")
	for _, s := range c.Steps {
		for _, ch := range s.Changes {
			v := ch.Verdict
			if v == NotJudged {
				v += ": " + ch.NotJudgedWhy
			}
			iv := ""
			if ch.NotJudgedWhy == "" {
				iv = fmt.Sprintf("[%+.1f, %+.1f] %%", 100*ch.Lo, 100*ch.Hi)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.1f %%\t%s\t%s\t\n", s.Label, ch.Metric, ms(ch.Base), ms(ch.New),
				100*ch.Rel, iv, v)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range c.Unmatched {
		fmt.Fprintln(w, "not compared:", u)
	}
	for _, n := range c.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if r := c.Regressions(); len(r) > 0 {
		fmt.Fprintf(w, "\nREGRESSED: %s\n", strings.Join(r, "; "))
	} else if len(c.Steps) == 0 {
		fmt.Fprintln(w, "\nno step in common: nothing compared")
	} else {
		fmt.Fprintln(w, "\nno regression")
	}
	return nil
}

func ms(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " ms"
}
