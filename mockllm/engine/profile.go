package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Modes of a Profile.
const (
	// ModeFixed gives every request exactly the profile's TTFT and ITL
	// (plus optional jitter), whatever the load.
	ModeFixed = "fixed"
	// ModeEngine runs the continuous-batching step model.
	ModeEngine = "engine"
	// ModeLoadCurve draws TTFT and ITL from measured distributions at the
	// number of requests in flight (see LoadCurve).
	ModeLoadCurve = "load_curve"
)

// Jitter distributions for fixed mode.
const (
	JitterNone      = "none"
	JitterNormal    = "normal"
	JitterLognormal = "lognormal"
	JitterUniform   = "uniform"
)

// Profile is a complete cost-model configuration. The zero value is not
// usable; start from Preset or LoadProfile and override fields. In YAML,
// durations are Go duration strings ("100ms", "1.5s").
type Profile struct {
	// Name labels the profile in logs and results.
	Name string `yaml:"name"`
	// Mode is ModeFixed, ModeEngine or ModeLoadCurve.
	Mode string `yaml:"mode"`

	// TTFT is the time from arrival to the first token (fixed mode).
	TTFT time.Duration `yaml:"ttft"`
	// ITL is the gap between consecutive tokens (fixed mode).
	ITL time.Duration `yaml:"itl"`
	// Jitter perturbs each TTFT and ITL independently (fixed mode).
	Jitter Jitter `yaml:"jitter"`

	// Engine-mode fields from here to MaxWaiting; fixed mode ignores them.

	// Beta0US, Beta1US and Beta2US define a step's duration in µs:
	// β0 + β1·(prefill tokens in step) + β2·(decode tokens in step).
	Beta0US float64 `yaml:"beta0_us"`
	Beta1US float64 `yaml:"beta1_us"`
	Beta2US float64 `yaml:"beta2_us"`
	// Beta3US is an optional attention term in µs per context token: it
	// multiplies the total context (computed plus new tokens) of every
	// sequence scheduled in the step. 0 leaves the fitted three-term model.
	Beta3US float64 `yaml:"beta3_us"`

	// MaxNumSeqs caps the running batch (vLLM --max-num-seqs).
	MaxNumSeqs int `yaml:"max_num_seqs"`
	// MaxNumBatchedTokens is the per-step token budget; prompts longer than
	// the remaining budget prefill in chunks (vLLM --max-num-batched-tokens).
	MaxNumBatchedTokens int `yaml:"max_num_batched_tokens"`
	// BlockSize is the number of tokens per KV-cache block.
	BlockSize int `yaml:"block_size"`
	// KVCacheBlocks is the KV cache's capacity in blocks.
	KVCacheBlocks int `yaml:"kv_cache_blocks"`
	// MaxWaiting limits the waiting queue (engine mode; fixed mode has no
	// queue); Start beyond it fails with ErrQueueFull. 0 means unbounded.
	MaxWaiting int `yaml:"max_waiting"`
	// GPU is the modelled GPU behind the DCGM-named gauges the engine mode
	// exposes (framebuffer, power, clocks); zero fields take DefaultGPU's.
	GPU GPUModel `yaml:"gpu,omitempty"`

	// MaxModelLen bounds prompt plus output tokens of one request (both
	// modes; the HTTP layer answers vLLM's 400 above it). 0 means no limit.
	MaxModelLen int `yaml:"max_model_len"`
	// ColdStart is the extra delay the first request pays after start, or
	// after IdleTimeout without work (model load, graph capture).
	ColdStart time.Duration `yaml:"cold_start"`
	// IdleTimeout is how long the engine may sit idle before the next
	// request pays ColdStart again. 0 means only the first request pays it.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// StartupDelay is how long the server reports itself unhealthy after
	// start; the HTTP layer enforces it, the scheduler ignores it.
	StartupDelay time.Duration `yaml:"startup_delay"`

	// LoadCurve is the load_curve mode's table; other modes ignore it.
	LoadCurve LoadCurve `yaml:"load_curve,omitempty"`
	// Validity is the range a fitted profile was fitted on (any mode); the
	// HTTP layer warns when driven outside it.
	Validity Validity `yaml:"validity,omitempty"`
}

// Jitter describes a distribution that multiplies each fixed-mode TTFT and
// ITL by a random factor with mean 1 and standard deviation CV. Samples are
// deterministic per request for a given seed.
type Jitter struct {
	// Dist is "none" (or empty), "normal", "lognormal" or "uniform".
	// normal is clamped at 0 (so CV is limited to 0.5); uniform spans
	// [1-√3·CV, 1+√3·CV] (so CV ≤ 1/√3); lognormal has any CV ≥ 0.
	Dist string `yaml:"dist,omitempty"`
	// CV is the coefficient of variation (stddev / mean) of the factor.
	CV float64 `yaml:"cv,omitempty"`
}

// enabled reports whether j perturbs anything.
func (j Jitter) enabled() bool {
	return j.Dist != "" && j.Dist != JitterNone && j.CV > 0
}

// Block sizes and memory figures behind the engine presets.
const (
	// kvBytesPerToken is Llama-3.1-8B's KV cache per token: 32 layers × 8
	// KV heads × 128 dims × 2 (K and V) × 2 bytes (bf16) = 128 KiB.
	kvBytesPerToken = 32 * 8 * 128 * 2 * 2
	// kvCacheBytes80G is what vLLM leaves for KV cache on an 80 GiB GPU at
	// gpu_memory_utilization 0.9 after 16 GiB of bf16 weights:
	// 80 GiB × 0.9 − 16 GiB = 56 GiB (activations and CUDA graphs ignored).
	kvCacheBytes80G = 80<<30*9/10 - 16<<30
	// presetBlockSize is vLLM's default block size on CUDA.
	presetBlockSize = 16
	// presetKVBlocks = 56 GiB / 128 KiB = 458,752 tokens = 28,672 blocks.
	presetKVBlocks = kvCacheBytes80G / kvBytesPerToken / presetBlockSize
)

// presets are the embedded profiles; Preset hands out copies.
var presets = map[string]Profile{
	"ideal": {
		Name:        "ideal",
		Mode:        ModeFixed,
		TTFT:        100 * time.Millisecond,
		ITL:         20 * time.Millisecond,
		MaxModelLen: 131072, // Llama-3.1's native context
	},
	// Step model fitted on vLLM, Llama-3.1-8B, TP1, H100 80GB (docs/facts.md).
	"llama3-8b-h100": engineProfile("llama3-8b-h100", 5753, 17.25, 6.0),
	// Same model on A100 80GB: same memory, so the same KV cache.
	"llama3-8b-a100": engineProfile("llama3-8b-a100", 16442, 47.8, 18.2),
}

// engineProfile returns a vLLM-like engine profile for Llama-3.1-8B on an
// 80 GiB GPU with the given step-time fit.
func engineProfile(name string, b0, b1, b2 float64) Profile {
	return Profile{
		Name:                name,
		Mode:                ModeEngine,
		Beta0US:             b0,
		Beta1US:             b1,
		Beta2US:             b2,
		MaxNumSeqs:          256,  // vLLM V1 default on GPUs
		MaxNumBatchedTokens: 8192, // vLLM V1 chunked-prefill default for online serving
		BlockSize:           presetBlockSize,
		KVCacheBlocks:       presetKVBlocks,
		MaxModelLen:         32768,
	}
}

// Preset returns the named embedded profile (see PresetNames).
func Preset(name string) (Profile, error) {
	p, ok := presets[name]
	if !ok {
		return Profile{}, fmt.Errorf("profile: unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	return p, nil
}

// PresetNames lists the embedded profiles, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// profileFile is the YAML document: a Profile plus an optional base preset
// whose values the file's fields override.
type profileFile struct {
	Base    string `yaml:"base"`
	Profile `       yaml:",inline"`
}

// LoadProfile reads a YAML profile from path (see ParseProfile).
func LoadProfile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParseProfile decodes and validates a YAML profile. Unknown fields are
// rejected. A top-level `base: NAME` starts from that preset, so a file
// only lists what it changes.
func ParseProfile(data []byte) (Profile, error) {
	var head struct {
		Base string `yaml:"base"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	if err := checkIntegers(data); err != nil {
		return Profile{}, err
	}
	var f profileFile
	if head.Base != "" {
		base, err := Preset(head.Base)
		if err != nil {
			return Profile{}, fmt.Errorf("profile: base: %w", err)
		}
		f.Profile = base
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	if err := f.Profile.Validate(); err != nil {
		return Profile{}, err
	}
	return f.Profile, nil
}

// rule is one validation check: when applies to p and ok fails, the error
// names field and says want, showing got.
type rule struct {
	field   string
	applies func(p *Profile) bool
	ok      func(p *Profile) bool
	want    string
	got     func(p *Profile) any
}

func always(*Profile) bool          { return true }
func fixedMode(p *Profile) bool     { return p.Mode == ModeFixed }
func engineMode(p *Profile) bool    { return p.Mode == ModeEngine }
func loadCurveMode(p *Profile) bool { return p.Mode == ModeLoadCurve }

// rules are checked in order; Validate reports every failure.
var rules = []rule{
	{"mode", always, func(p *Profile) bool { return p.Mode == ModeFixed || p.Mode == ModeEngine || loadCurveMode(p) },
		`must be "fixed", "engine" or "load_curve"`, func(p *Profile) any { return fmt.Sprintf("%q", p.Mode) }},
	{"load_curve.levels", loadCurveMode, func(p *Profile) bool { return p.LoadCurve.checkLevels() == "" },
		"must list in-flight levels in increasing order with non-decreasing, non-negative quantiles",
		func(p *Profile) any { return p.LoadCurve.checkLevels() }},
	{"load_curve.prompt_tokens", loadCurveMode, func(p *Profile) bool { return p.LoadCurve.PromptTokens >= 0 },
		"must be >= 0", func(p *Profile) any { return p.LoadCurve.PromptTokens }},
	{"load_curve.ttft_per_prompt_token_us", loadCurveMode,
		func(p *Profile) bool { return finite(p.LoadCurve.TTFTPerPromptTokenUS) },
		"must be finite", func(p *Profile) any { return p.LoadCurve.TTFTPerPromptTokenUS }},
	{"validity", always, func(p *Profile) bool { return p.Validity.check() }, "bounds must be >= 0 with min <= max",
		func(p *Profile) any { return fmt.Sprintf("%+v", p.Validity) }},
	{
		"ttft",
		fixedMode,
		func(p *Profile) bool { return p.TTFT >= 0 },
		"must be >= 0",
		func(p *Profile) any { return p.TTFT },
	},
	{
		"itl",
		fixedMode,
		func(p *Profile) bool { return p.ITL > 0 },
		"must be > 0",
		func(p *Profile) any { return p.ITL },
	},
	{"jitter.dist", fixedMode, func(p *Profile) bool {
		switch p.Jitter.Dist {
		case "", JitterNone, JitterNormal, JitterLognormal, JitterUniform:
			return true
		}
		return false
	}, `must be "none", "normal", "lognormal" or "uniform"`, func(p *Profile) any { return fmt.Sprintf("%q", p.Jitter.Dist) }},
	{"jitter.cv", fixedMode, func(p *Profile) bool { return p.Jitter.CV >= 0 && !math.IsInf(p.Jitter.CV, 0) },
		"must be >= 0 and finite", func(p *Profile) any { return p.Jitter.CV }},
	{"jitter.cv", func(p *Profile) bool { return fixedMode(p) && p.Jitter.Dist == JitterNormal },
		func(p *Profile) bool { return p.Jitter.CV <= 0.5 }, "must be <= 0.5 for normal", func(p *Profile) any { return p.Jitter.CV }},
	{"jitter.cv", func(p *Profile) bool { return fixedMode(p) && p.Jitter.Dist == JitterUniform },
		func(p *Profile) bool { return p.Jitter.CV <= 1/math.Sqrt(3) }, "must be <= 0.577 (1/√3) for uniform", func(p *Profile) any { return p.Jitter.CV }},
	{"beta0_us", engineMode, func(p *Profile) bool { return p.Beta0US > 0 && !math.IsInf(p.Beta0US, 0) },
		"must be > 0 and finite (every step costs time)", func(p *Profile) any { return p.Beta0US }},
	{
		"beta1_us",
		engineMode,
		func(p *Profile) bool { return finiteNonNeg(p.Beta1US) },
		"must be >= 0 and finite",
		func(p *Profile) any { return p.Beta1US },
	},
	{
		"beta2_us",
		engineMode,
		func(p *Profile) bool { return finiteNonNeg(p.Beta2US) },
		"must be >= 0 and finite",
		func(p *Profile) any { return p.Beta2US },
	},
	{
		"beta3_us",
		engineMode,
		func(p *Profile) bool { return finiteNonNeg(p.Beta3US) },
		"must be >= 0 and finite",
		func(p *Profile) any { return p.Beta3US },
	},
	{
		"max_num_seqs",
		engineMode,
		func(p *Profile) bool { return p.MaxNumSeqs >= 1 },
		"must be >= 1",
		func(p *Profile) any { return p.MaxNumSeqs },
	},
	{
		"max_num_batched_tokens",
		engineMode,
		func(p *Profile) bool { return p.MaxNumBatchedTokens >= max(p.MaxNumSeqs, 1) },
		"must be >= max_num_seqs (each running sequence needs a token per step)",
		func(p *Profile) any { return p.MaxNumBatchedTokens },
	},
	{
		"block_size",
		engineMode,
		func(p *Profile) bool { return p.BlockSize >= 1 },
		"must be >= 1",
		func(p *Profile) any { return p.BlockSize },
	},
	{
		"kv_cache_blocks",
		engineMode,
		func(p *Profile) bool { return p.KVCacheBlocks >= 1 },
		"must be >= 1",
		func(p *Profile) any { return p.KVCacheBlocks },
	},
	{
		"max_waiting",
		always,
		func(p *Profile) bool { return p.MaxWaiting >= 0 },
		"must be >= 0 (0 = unbounded)",
		func(p *Profile) any { return p.MaxWaiting },
	},
	{
		"max_model_len",
		always,
		func(p *Profile) bool { return p.MaxModelLen >= 0 },
		"must be >= 0 (0 = no limit)",
		func(p *Profile) any { return p.MaxModelLen },
	},
	{"max_model_len", func(p *Profile) bool { return engineMode(p) && p.BlockSize >= 1 && p.KVCacheBlocks >= 1 },
		func(p *Profile) bool {
			return p.MaxModelLen <= p.KVCacheBlocks*p.BlockSize && p.MaxModelLen > 0
		}, "must be > 0 and fit the KV cache (kv_cache_blocks × block_size tokens)", func(p *Profile) any { return p.MaxModelLen }},
	{
		"cold_start",
		always,
		func(p *Profile) bool { return p.ColdStart >= 0 },
		"must be >= 0",
		func(p *Profile) any { return p.ColdStart },
	},
	{
		"idle_timeout",
		always,
		func(p *Profile) bool { return p.IdleTimeout >= 0 },
		"must be >= 0",
		func(p *Profile) any { return p.IdleTimeout },
	},
	{
		"startup_delay",
		always,
		func(p *Profile) bool { return p.StartupDelay >= 0 },
		"must be >= 0",
		func(p *Profile) any { return p.StartupDelay },
	},
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }

// Validate checks p and returns every violated rule, each naming its YAML
// field, e.g. "profile: itl: must be > 0, got -5ms".
func (p Profile) Validate() error {
	var errs []error
	for _, r := range rules {
		if r.applies(&p) && !r.ok(&p) {
			errs = append(errs, fmt.Errorf("profile: %s: %s, got %v", r.field, r.want, r.got(&p)))
		}
	}
	if err := p.GPU.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Set overrides one field by its YAML name ("max_num_seqs", "ttft",
// "jitter.cv"), parsing value as the YAML file would, so command-line
// flags and files share one set of names and rules. Validate afterwards.
func (p *Profile) Set(key, value string) error {
	path := strings.Split(key, ".")
	// Build {a: {b: value}} as a node tree, so value is parsed as a plain scalar.
	node := &yaml.Node{Kind: yaml.ScalarNode, Value: value}
	for i := len(path) - 1; i >= 0; i-- {
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: path[i]}, node}}
	}
	data, err := yaml.Marshal(node)
	if err != nil {
		return fmt.Errorf("profile: %s: %w", key, err)
	}
	if err := checkIntegers(data); err != nil {
		return err
	}
	q := *p
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&q); err != nil {
		return fmt.Errorf("profile: %s=%q: %w", key, value, err)
	}
	*p = q
	return nil
}

// intFields are the YAML names of Profile's integer fields.
var intFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Profile]()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Int {
			m[strings.Split(f.Tag.Get("yaml"), ",")[0]] = true
		}
	}
	return m
}()

// checkIntegers rejects non-integer values of integer fields, which
// yaml.v3 would otherwise truncate (max_num_seqs: 1.5 becoming 1).
func checkIntegers(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil // empty, or not a mapping: the decoder reports it
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if intFields[k.Value] && v.Kind == yaml.ScalarNode && v.ShortTag() != "!!int" {
			return fmt.Errorf("profile: %s: must be an integer, got %s", k.Value, v.Value)
		}
	}
	return nil
}
