package fit

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Option configures Fit.
type Option func(*config)

type config struct {
	server *ServerBatch
	target string
	base   engine.Profile
	gapNS  int64
	name   string
	mode   string
}

// WithTarget fits the records of the named target (needed when a run
// measured several).
func WithTarget(name string) Option { return func(c *config) { c.target = name } }

// WithBase takes the fields a run cannot reveal (KV-cache size, block size,
// token budget, max_model_len) from p. Default: the llama3-8b-h100 preset.
func WithBase(p engine.Profile) Option { return func(c *config) { c.base = p } }

// WithBurstGap overrides the gap that separates two steps' bursts of chunks
// (default: half the shortest typical inter-token gap).
func WithBurstGap(d time.Duration) Option { return func(c *config) { c.gapNS = int64(d) } }

// WithName names the fitted profile.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// ModeAuto lets Fit choose the mode by held-out error (see choose.go).
const ModeAuto = "auto"

// WithMode forces the fitted profile's mode (engine.ModeFixed,
// engine.ModeEngine or engine.ModeLoadCurve); "" or ModeAuto chooses by
// how well each reproduces held-out steps of the run.
func WithMode(mode string) Option { return func(c *config) { c.mode = mode } }

// WithServerBatch adds the server's own batch gauges (see Dir, which
// reads them from server_metrics.jsonl when the run scraped any).
func WithServerBatch(b ServerBatch) Option { return func(c *config) { c.server = &b } }

// Result is a fitted profile and the evidence behind it.
type Result struct {
	Profile  engine.Profile
	Target   string
	Requests int // records of the target

	// Engine is the step-model fit; nil when it failed (EngineErr says why).
	Engine    *Engine
	EngineErr error
	Fixed     Fixed
	// LoadCurve is the load-curve fit; nil when it failed (LoadCurveErr).
	LoadCurve    *LoadCurve
	LoadCurveErr error
	// Choice is how the mode was chosen (every mode's held-out error).
	Choice *Choice
	// Notes are caveats in plain words, printed with the fit.
	Notes []string
}

// Engine is the least-squares fit of the step model to reconstructed steps.
type Engine struct {
	Beta0US, Beta1US, Beta2US float64
	StdErrUS                  [3]float64 // standard errors of β0, β1, β2
	R2                        float64
	RMSEMS                    float64 // residual RMS per step
	ResidP50MS, ResidP99MS    float64 // absolute residuals
	Steps                     int     // steps fitted
	Outliers                  int     // steps left out as outliers (cold starts, stalls)
	IdleSteps                 int     // steps that began from idle (prefill-only rows)
	MeanStepMS                float64
	BurstGapMS                float64
	Consistency               float64 // share of requests whose span matches N_out − 1 steps
	// SendToEngineMS is the fitted extra time of steps that began from idle:
	// from the client's send to the engine starting the step (network,
	// HTTP parsing, tokenization). 0 when the run had too few such steps.
	SendToEngineMS float64
	Merged         int // requests with two chunks in one burst
	Rejoined       int // bursts merged back as the late tail of the burst before
	Split          int // bursts split because they held two chunks of one request
	CatchUps       int // pauses after which the server wrote several steps at once (their rows left out)

	MaxPrefill int  // most prompt tokens in one fitted step
	MaxDecode  int  // most decoding sequences in one fitted step
	MaxBatch   int  // largest batch seen
	MaxNumSeqs int  // estimate written to the profile
	Saturated  bool // requests queued behind a full batch: MaxNumSeqs = MaxBatch
	// CapSource says where MaxNumSeqs comes from: "reconstructed steps",
	// "server metrics", or "not reached".
	CapSource string
	Server    *ServerBatch // the server's gauges, when the run scraped them
	Queued    int          // requests that waited two or more whole steps

	ColdStart   time.Duration // extra time of cold steps over the model
	ColdSteps   int
	IdleTimeout time.Duration // 0: only the first request paid the cold start
}

// Fixed is the fixed-mode fit from the least-loaded step.
type Fixed struct {
	Level    string // the step it comes from, e.g. "c=1"
	Requests int
	TTFT     time.Duration // median
	ITL      time.Duration // median, per token
	CV       float64       // robust coefficient of variation of ITL
	TTFTP99  time.Duration
	ITLP99   time.Duration
}

// Quality gates of the engine fit: below them Fit writes a fixed profile.
const (
	minConsistency = 0.90
	minSteps       = 30
	maxRelRMSE     = 0.10 // RMSE over mean step
	minR2          = 0.90
)

// Dir fits the run in dir (its requests.jsonl).
func Dir(dir string, opts ...Option) (*Result, error) {
	recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
	if err != nil {
		return nil, fmt.Errorf("fit: %w", err)
	}
	b, ok, err := readServerBatch(dir)
	if err != nil {
		return nil, fmt.Errorf("fit: %w", err)
	}
	if ok {
		opts = append([]Option{WithServerBatch(b)}, opts...)
	}
	return Records(recs, opts...)
}

// Records fits a mock profile to the records of one run against a server.
func Records(recs []results.Record, opts ...Option) (*Result, error) {
	base, err := engine.Preset("llama3-8b-h100")
	if err != nil {
		return nil, err
	}
	cfg := config{base: base}
	for _, o := range opts {
		o(&cfg)
	}
	switch cfg.mode {
	case "", ModeAuto, engine.ModeFixed, engine.ModeEngine, engine.ModeLoadCurve:
	default:
		return nil, fmt.Errorf("fit: mode %q: want %s, %s, %s or %s", cfg.mode,
			engine.ModeFixed, engine.ModeEngine, engine.ModeLoadCurve, ModeAuto)
	}
	target, mine, err := pickTarget(recs, cfg.target)
	if err != nil {
		return nil, err
	}
	res := &Result{Target: target, Requests: len(mine)}

	res.Fixed, err = fitFixed(mine)
	if err != nil {
		return nil, err
	}
	res.Engine, res.EngineErr = fitEngine(mine, cfg.gapNS)
	if b := cfg.server; b != nil && res.Engine != nil {
		res.Engine.applyServerBatch(*b)
	}
	res.LoadCurve, res.LoadCurveErr = fitLoadCurve(mine)
	if res.LoadCurveErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("no load curve: %v", res.LoadCurveErr))
	}

	p := cfg.base
	p.Name = cfg.name
	if p.Name == "" {
		p.Name = "fitted-" + target
	}
	setFixed(&p, res.Fixed)
	engineWhy := ""
	if e := res.Engine; e != nil {
		setEngine(&p, e)
		if why := e.weakness(); why != "" {
			engineWhy = "engine fit is weak: " + why
			res.Notes = append(res.Notes, engineWhy)
		}
	} else {
		engineWhy = fmt.Sprintf("no engine fit: %v", res.EngineErr)
		res.Notes = append(res.Notes, engineWhy)
	}
	if res.LoadCurve != nil {
		p.LoadCurve = res.LoadCurve.Curve
		p.Validity = res.LoadCurve.Validity
	}
	mode, err := pickMode(res, mine, cfg, engineWhy)
	if err != nil {
		return nil, err
	}
	p.Mode = mode
	if mode != engine.ModeLoadCurve {
		p.LoadCurve = engine.LoadCurve{}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("fit: fitted profile is invalid: %w", err)
	}
	res.Profile = p
	return res, nil
}

// pickMode scores the modes on held-out steps and returns the one asked
// for, or in auto mode the one chosen.
func pickMode(res *Result, recs []results.Record, cfg config, engineWhy string) (string, error) {
	ch, err := choose(recs, cfg, engineWhy == "", engineWhy)
	res.Choice = ch
	forced := cfg.mode != "" && cfg.mode != ModeAuto
	switch {
	case forced && cfg.mode == engine.ModeEngine && res.Engine == nil:
		return "", fmt.Errorf("fit: engine mode asked for, but %w", res.EngineErr)
	case forced && cfg.mode == engine.ModeLoadCurve && res.LoadCurve == nil:
		return "", fmt.Errorf("fit: load_curve mode asked for, but %w", res.LoadCurveErr)
	case forced:
		return cfg.mode, nil
	case err != nil:
		res.Notes = append(res.Notes, fmt.Sprintf("modes not compared (%v): fixed", err))
		return engine.ModeFixed, nil
	}
	return ch.Mode, nil
}

// setFixed writes the fixed-mode fields of f into p.
func setFixed(p *engine.Profile, f Fixed) {
	p.TTFT, p.ITL = f.TTFT, f.ITL
	p.Jitter = engine.Jitter{}
	if f.CV >= 0.01 {
		p.Jitter = engine.Jitter{Dist: engine.JitterLognormal, CV: round(f.CV, 3)}
	}
}

// setEngine writes the step model of e into p.
func setEngine(p *engine.Profile, e *Engine) {
	p.Beta0US = round(e.Beta0US, 2)
	p.Beta1US = round(e.Beta1US, 4)
	p.Beta2US = round(e.Beta2US, 4)
	p.Beta3US = 0
	p.ColdStart, p.IdleTimeout = e.ColdStart, e.IdleTimeout
	p.MaxNumSeqs = e.MaxNumSeqs
	p.MaxNumBatchedTokens = max(p.MaxNumBatchedTokens, p.MaxNumSeqs)
}

// pickTarget returns the records of the requested target, or of the only one.
func pickTarget(recs []results.Record, want string) (string, []results.Record, error) {
	by := map[string][]results.Record{}
	for _, r := range recs {
		by[r.Target] = append(by[r.Target], r)
	}
	if want != "" {
		if len(by[want]) == 0 {
			return "", nil, fmt.Errorf("fit: target %q has no records (have %s)", want, strings.Join(keys(by), ", "))
		}
		return want, by[want], nil
	}
	switch len(by) {
	case 0:
		return "", nil, errors.New("fit: no records")
	case 1:
		for t, rs := range by {
			return t, rs, nil
		}
	}
	return "", nil, fmt.Errorf(
		"fit: the run measured several targets (%s): choose one with --target",
		strings.Join(keys(by), ", "),
	)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fitFixed takes TTFT and ITL from the least-loaded step of the run, where
// queueing inside the server is least.
func fitFixed(recs []results.Record) (Fixed, error) {
	type level struct {
		step int
		c    int
		rate float64
	}
	levels := map[int]level{}
	for _, r := range recs {
		if r.OK() && !r.Warmup && r.FirstTokenNS > 0 {
			levels[r.Step] = level{r.Step, r.Concurrency, r.Rate}
		}
	}
	if len(levels) == 0 {
		return Fixed{}, errors.New("fit: no successful request with a first token")
	}
	var low *level
	load := func(l level) float64 { // closed loop before open loop, then by load
		if l.c > 0 {
			return float64(l.c)
		}
		return 1e9 + l.rate
	}
	for _, l := range levels {
		if low == nil || load(l) < load(*low) || (load(l) == load(*low) && l.step < low.step) {
			l := l
			low = &l
		}
	}
	f := Fixed{Level: results.LoadLabel(low.c, 0)}
	if low.c == 0 {
		f.Level = fmt.Sprintf("%g req/s", low.rate)
	}
	var ttft, itl []float64
	for _, r := range recs {
		if r.Step != low.step || !r.OK() || r.Warmup || r.FirstTokenNS == 0 {
			continue
		}
		f.Requests++
		ttft = append(ttft, float64(r.FirstTokenNS-r.SentNS))
		for i, g := range r.ChunkGapsNS {
			k := 1
			if i+1 < len(r.ChunkTokens) && r.ChunkTokens[i+1] > 0 {
				k = int(r.ChunkTokens[i+1])
			}
			for j := 0; j < k; j++ {
				itl = append(itl, float64(g)/float64(k))
			}
		}
	}
	f.TTFT = time.Duration(analysis.Quantile(ttft, 0.5))
	f.TTFTP99 = time.Duration(analysis.Quantile(ttft, 0.99))
	if len(itl) == 0 {
		// Single-token outputs: no ITL to measure; keep a positive value.
		f.ITL = time.Millisecond
		return f, nil
	}
	med := analysis.Quantile(itl, 0.5)
	f.ITL = time.Duration(med)
	f.ITLP99 = time.Duration(analysis.Quantile(itl, 0.99))
	if med > 0 {
		f.CV = math.Min(robustSigma(itl)/med, 1)
	}
	return f, nil
}

// fitEngine reconstructs the steps and fits β by least squares, trimming
// outliers (cold starts, stalls, client hiccups) in rounds: each round
// leaves out the steps more than 6 robust standard deviations off, at most
// the worst 2 % of them, so that a few huge cold steps, which drag the
// first fit, are gone before they can make ordinary steps look wrong.
func fitEngine(recs []results.Record, gapNS int64) (*Engine, error) {
	rc, err := reconstruct(recs, gapNS)
	if err != nil {
		return nil, err
	}
	if len(rc.Steps) < 4 {
		return nil, fmt.Errorf("only %d steps reconstructed", len(rc.Steps))
	}
	// A step that began from idle is timed from the request's send, but the
	// engine started it only when the request arrived: a fourth term (1 on
	// idle-start rows) takes up that send→engine delay, so it biases
	// neither β0 nor, through β0, β2.
	// With only a few idle rows the term could soak up a cold start whole,
	// so then it joins after the outliers are trimmed.
	nIdle := 0
	for _, s := range rc.Steps {
		if s.Idle {
			nIdle++
		}
	}
	withIdle := nIdle >= 20 && nIdle < len(rc.Steps)
	out := map[int]bool{}
	rows := func() ([][]float64, []float64, []int) {
		var X [][]float64
		var y []float64
		var idx []int
		for i, s := range rc.Steps {
			if out[i] || s.Stall || (i > 0 && rc.Steps[i-1].Stall) {
				continue // a catch-up's steps have no observable end or start
			}
			row := []float64{1, float64(s.Prefill), float64(s.Decode)}
			if withIdle {
				row = append(row, b2f(s.Idle))
			}
			X = append(X, row)
			y = append(y, float64(s.End-s.Start)/1e3) // µs
			idx = append(idx, i)
		}
		return X, y, idx
	}
	X, y, idx := rows()
	fit, err := leastSquares(X, y)
	if err != nil {
		return nil, fmt.Errorf("%w: a run with several concurrency levels and prompt lengths separates them", err)
	}
	const maxRounds = 20
	for round := 0; round < maxRounds; round++ {
		sigma := robustSigma(fit.Resid)
		type cand struct {
			i   int
			abs float64
		}
		var bad []cand
		for r, e := range fit.Resid {
			if a := math.Abs(e); a > 6*sigma && a > 50 { // and > 50 µs: exact data has σ ≈ 0
				bad = append(bad, cand{idx[r], a})
			}
		}
		if len(bad) == 0 {
			break
		}
		sort.Slice(bad, func(a, b int) bool { return bad[a].abs > bad[b].abs })
		bad = bad[:max(1, min(len(bad), len(y)/50))]
		var next linearFit
		var X2 [][]float64
		var y2 []float64
		var idx2 []int
		for {
			for _, b := range bad {
				out[b.i] = true
			}
			X2, y2, idx2 = rows()
			if next, err = leastSquares(X2, y2); err == nil {
				break
			}
			for _, b := range bad { // unsolvable without them: keep them
				delete(out, b.i)
			}
			if len(bad) == 1 {
				break
			}
			bad = bad[:1] // try the worst alone
		}
		if err != nil {
			break
		}
		fit = next
		y = y2
		idx = idx2
	}
	keptIdle := 0
	for _, i := range idx {
		if rc.Steps[i].Idle {
			keptIdle++
		}
	}
	if !withIdle && keptIdle >= 3 && keptIdle < len(idx) {
		withIdle = true
		X2, y2, idx2 := rows()
		if next, err := leastSquares(X2, y2); err == nil {
			fit = next
			y = y2
			idx = idx2
		} else {
			withIdle = false
		}
	}
	predict := func(s step) float64 {
		p := fit.Coef[0] + fit.Coef[1]*float64(s.Prefill) + fit.Coef[2]*float64(s.Decode)
		if withIdle && s.Idle {
			p += fit.Coef[3]
		}
		return p
	}
	sigma := robustSigma(fit.Resid)
	e := &Engine{
		Beta0US: fit.Coef[0], Beta1US: fit.Coef[1], Beta2US: fit.Coef[2],
		StdErrUS:    [3]float64{fit.StdErr[0], fit.StdErr[1], fit.StdErr[2]},
		R2:          fit.R2,
		RMSEMS:      fit.RMSE / 1e3,
		Steps:       fit.N,
		Outliers:    len(out),
		BurstGapMS:  float64(rc.GapNS) / 1e6,
		Consistency: float64(rc.Consistent) / float64(rc.Requests),
		Merged:      rc.Merged,
		Rejoined:    rc.Rejoined,
		Split:       rc.Split,
		CatchUps:    rc.CatchUps,
		MaxBatch:    rc.MaxBatch,
		Queued:      rc.Queued,
	}
	if withIdle {
		e.SendToEngineMS = fit.Coef[3] / 1e3
	}
	abs := make([]float64, len(fit.Resid))
	var sum float64
	for i, r := range fit.Resid {
		abs[i] = math.Abs(r)
		sum += y[i]
	}
	e.MeanStepMS = sum / float64(len(y)) / 1e3
	e.ResidP50MS = analysis.Quantile(abs, 0.5) / 1e3
	e.ResidP99MS = analysis.Quantile(abs, 0.99) / 1e3
	for _, i := range idx {
		s := rc.Steps[i]
		if s.Idle {
			e.IdleSteps++
		}
		e.MaxPrefill = max(e.MaxPrefill, s.Prefill)
		e.MaxDecode = max(e.MaxDecode, s.Decode)
	}

	// max_num_seqs: when requests queued behind batches at the largest size
	// seen, that size is the cap. Otherwise the cap was never reached; keep
	// vLLM's default, or the largest batch when it is larger.
	e.MaxNumSeqs, e.CapSource = max(e.MaxBatch, 256), "not reached"
	if rc.Queued > 0 && len(rc.QueuedBehind) > 0 {
		if analysis.Quantile(toFloats(rc.QueuedBehind), 0.5) >= 0.95*float64(rc.MaxBatch) {
			e.Saturated = true
			e.MaxNumSeqs, e.CapSource = rc.MaxBatch, "reconstructed steps"
		}
	}

	// Cold starts: idle-start steps far above the model. The extra time is
	// the cold start; an idle period before a later cold step bounds the
	// idle timeout.
	var cold []float64
	var coldGaps []int64
	for i, s := range rc.Steps {
		if !s.Idle || s.Stall || (i > 0 && rc.Steps[i-1].Stall) {
			continue
		}
		extra := float64(s.End-s.Start)/1e3 - predict(s)
		if extra > math.Max(6*sigma, 1000) { // and > 1 ms
			cold = append(cold, extra)
			if i > 0 {
				coldGaps = append(coldGaps, s.Start-rc.Steps[i-1].End)
			}
		}
	}
	if len(cold) > 0 {
		e.ColdSteps = len(cold)
		e.ColdStart = time.Duration(analysis.Quantile(cold, 0.5) * 1e3).Round(time.Millisecond)
		if len(coldGaps) > 0 {
			sort.Slice(coldGaps, func(a, b int) bool { return coldGaps[a] < coldGaps[b] })
			e.IdleTimeout = time.Duration(coldGaps[0]).Truncate(100 * time.Millisecond)
		}
	}
	return e, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// applyServerBatch prefers the server's own gauges for the batch cap: the
// largest running batch scraped while requests waited, unless the KV cache
// was (nearly) full then, which makes requests wait below the cap.
func (e *Engine) applyServerBatch(b ServerBatch) {
	e.Server = &b
	if b.QueuedScrapes == 0 || b.MaxRunningQueued == 0 || b.MaxKVUsage >= 0.95 {
		return
	}
	e.Saturated = true
	e.MaxNumSeqs, e.CapSource = b.MaxRunningQueued, "server metrics"
}

func toFloats(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// weakness says why the fit should not drive an engine profile, or "".
func (e *Engine) weakness() string {
	var why []string
	if e.Consistency < minConsistency {
		why = append(
			why,
			fmt.Sprintf(
				"only %.0f%% of requests agree with the reconstructed steps (want ≥ %.0f%%): the server may not batch in "+
					"lockstep, or --burst-gap needs setting",
				100*e.Consistency,
				100*minConsistency,
			),
		)
	}
	if e.Steps < minSteps {
		why = append(why, fmt.Sprintf("only %d steps (want ≥ %d)", e.Steps, minSteps))
	}
	if e.R2 < minR2 && e.RMSEMS > maxRelRMSE*e.MeanStepMS {
		why = append(
			why,
			fmt.Sprintf("R² %.3f and residual RMS %.3f ms over a mean step of %.3f ms", e.R2, e.RMSEMS, e.MeanStepMS),
		)
	}
	// A term is too uncertain when its standard error, at the largest
	// prefill or batch seen, moves a step by more than 10 % of a mean step.
	for _, u := range []struct {
		name string
		se   float64
	}{
		{"β0", e.StdErrUS[0]},
		{"β1", e.StdErrUS[1] * float64(e.MaxPrefill)},
		{"β2", e.StdErrUS[2] * float64(e.MaxDecode)},
	} {
		if u.se > maxRelRMSE*e.MeanStepMS*1e3 {
			why = append(
				why,
				fmt.Sprintf(
					"%s is too uncertain (±%.0f µs of a step's time; a wider concurrency ladder and spread of prompt lengths pin it "+
						"down)",
					u.name,
					u.se,
				),
			)
		}
	}
	if e.Beta0US <= 0 || e.Beta1US < 0 || e.Beta2US < 0 {
		why = append(
			why,
			fmt.Sprintf("a negative or zero coefficient (β = %.1f, %.3f, %.3f µs)", e.Beta0US, e.Beta1US, e.Beta2US),
		)
	}
	return strings.Join(why, "; ")
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Print writes the fit and its goodness in plain words.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "fit of target %q from %d requests\n", r.Target, r.Requests)
	f := r.Fixed
	fmt.Fprintf(w, "fixed: at %s (%d requests): TTFT p50 %s (p99 %s), ITL p50 %s (p99 %s), ITL spread CV %.3f\n",
		f.Level, f.Requests, fmtMS(f.TTFT), fmtMS(f.TTFTP99), fmtMS(f.ITL), fmtMS(f.ITLP99), f.CV)
	if e := r.Engine; e != nil {
		fmt.Fprintf(
			w,
			"engine: step time = β0 + β1·prefill tokens + β2·decode tokens, least squares over %d reconstructed steps (%d "+
				"from idle, %d outliers left out)\n",
			e.Steps,
			e.IdleSteps,
			e.Outliers,
		)
		fmt.Fprintf(w, "  β0 = %.1f ± %.1f µs   β1 = %.3f ± %.3f µs/token   β2 = %.3f ± %.3f µs/token\n",
			e.Beta0US, e.StdErrUS[0], e.Beta1US, e.StdErrUS[1], e.Beta2US, e.StdErrUS[2])
		fmt.Fprintf(
			w,
			"  goodness: R² %.4f, residual RMS %.3f ms, |residual| p50 %.3f ms p99 %.3f ms, mean step %.3f ms\n",
			e.R2,
			e.RMSEMS,
			e.ResidP50MS,
			e.ResidP99MS,
			e.MeanStepMS,
		)
		if e.SendToEngineMS != 0 {
			fmt.Fprintf(
				w,
				"  steps from idle start %.3f ms after the client's send (network, parsing, tokenization)\n",
				e.SendToEngineMS,
			)
		}
		fmt.Fprintf(
			w,
			"  reconstruction: bursts cut at %.3f ms gaps, %d split, %d catch-ups after pauses, %d late tails rejoined; "+
				"%.1f%% of requests span exactly N_out−1 steps; %d with two chunks in one burst\n",
			e.BurstGapMS,
			e.Split,
			e.CatchUps,
			e.Rejoined,
			100*e.Consistency,
			e.Merged,
		)
		switch {
		case e.CapSource == "server metrics":
			fmt.Fprintf(
				w,
				"  max_num_seqs = %d: the server's running batch while %d of %d scrapes showed requests waiting (KV cache at "+
					"most %.0f%% then)\n",
				e.MaxNumSeqs,
				e.Server.QueuedScrapes,
				e.Server.Scrapes,
				100*e.Server.MaxKVUsage,
			)
		case e.Saturated:
			fmt.Fprintf(
				w,
				"  max_num_seqs = %d: %d requests queued behind batches of that size\n",
				e.MaxNumSeqs,
				e.Queued,
			)
		default:
			fmt.Fprintf(
				w,
				"  max_num_seqs: never reached (largest batch %d, %d requests queued); profile keeps %d\n",
				e.MaxBatch,
				e.Queued,
				e.MaxNumSeqs,
			)
		}
		if e.ColdSteps > 0 {
			fmt.Fprintf(
				w,
				"  cold start %s (%d cold steps), idle timeout %s\n",
				e.ColdStart,
				e.ColdSteps,
				e.IdleTimeout,
			)
		} else {
			fmt.Fprintln(w, "  cold start: none seen (a run whose first request was warm shows none)")
		}
	}
	if lc := r.LoadCurve; lc != nil {
		r.printLoadCurve(w)
	}
	if r.Choice != nil {
		r.Choice.print(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	fmt.Fprintf(w, "profile %q, mode %s\n", r.Profile.Name, r.Profile.Mode)
	if v := r.Profile.Validity; v.Stated() {
		fmt.Fprintf(w, "valid for %d–%d requests in flight and prompts of %d–%d tokens (the mock warns outside)\n",
			v.MinInFlight, v.MaxInFlight, v.MinPromptTokens, v.MaxPromptTokens)
	}
}

func fmtMS(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

// WriteProfile writes the fitted profile as YAML that `testbed mock
// --profile FILE` and engine.LoadProfile accept, with the fit's evidence as
// comments.
func (r *Result) WriteProfile(path string) error {
	b, err := r.ProfileYAML()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("fit: %w", err)
	}
	return nil
}

// ProfileYAML renders the profile file.
func (r *Result) ProfileYAML() ([]byte, error) {
	body, err := yaml.Marshal(r.Profile)
	if err != nil {
		return nil, fmt.Errorf("fit: encode profile: %w", err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Fitted by `testbed fit` from %d requests of target %q.\n", r.Requests, r.Target)
	var report strings.Builder
	r.Print(&report)
	for _, line := range strings.Split(strings.TrimRight(report.String(), "\n"), "\n") {
		sb.WriteString("# " + line + "\n")
	}
	sb.Write(body)
	return []byte(sb.String()), nil
}
