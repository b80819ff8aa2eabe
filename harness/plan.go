package harness

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/netem"
)

// Plan is a whole run: who to load, with what requests, how hard. It is
// read from YAML by ParsePlan and written back, fully resolved, into
// run.json, so a saved run can be rerun with the same requests.
type Plan struct {
	Name       string   `yaml:"name,omitempty"           json:"name,omitempty"`
	Seed       int64    `yaml:"seed"                     json:"seed"`
	Targets    []Target `yaml:"targets"                  json:"targets"`
	Dataset    Dataset  `yaml:"dataset"                  json:"dataset"`
	Load       Load     `yaml:"load"                     json:"load"`
	Timeouts   Timeouts `yaml:"timeouts"                 json:"timeouts"`
	Connection string   `yaml:"connection,omitempty"     json:"connection"` // "reuse" (default) or "new" per request
	HTTP       string   `yaml:"http,omitempty"           json:"http"`       // "1.1" (default) or "2"
	Stream     *bool    `yaml:"stream,omitempty"         json:"stream"`     // default true
	// ask vLLM-style servers for exactly max_tokens
	IgnoreEOS bool       `yaml:"ignore_eos,omitempty"     json:"ignore_eos"`
	TLS       TLS        `yaml:"tls,omitempty"            json:"tls"`
	Retry     Retry      `yaml:"retry,omitempty"          json:"retry"`
	SLO       SLO        `yaml:"slo,omitempty"            json:"slo"`
	Extra     []StepSpec `yaml:"steps,omitempty"          json:"steps,omitempty"`
	// scenario.go: cold start, long context, …
	Scenarios *Scenarios `yaml:"scenarios,omitempty"      json:"scenarios,omitempty"`
	// Server-side sampling during the run (sampling.go).
	ServerMetrics *ServerMetrics `yaml:"server_metrics,omitempty" json:"server_metrics,omitempty"`
	GPU           *GPUSampling   `yaml:"gpu,omitempty"            json:"gpu,omitempty"`
	// Shard makes this run one part of a scaled-out run (shard.go).
	Shard *Shard `yaml:"shard,omitempty"          json:"shard,omitempty"`
}

// Target is one server under test.
type Target struct {
	Name  string `yaml:"name"                  json:"name"`
	URL   string `yaml:"url"                   json:"url"` // base URL, with or without /v1
	API   string `yaml:"api,omitempty"         json:"api"`
	Model string `yaml:"model"                 json:"model"`
	// name of the env var holding the key; the key itself is never stored
	APIKeyEnv string            `yaml:"api_key_env,omitempty" json:"api_key_env,omitempty"`
	Headers   map[string]string `yaml:"headers,omitempty"     json:"headers,omitempty"`
	// Network puts an emulated link in front of the target (network.go).
	Network *Network `yaml:"network,omitempty"     json:"network,omitempty"`

	link *netem.Proxy // the running link's proxy, while Run runs
}

// API kinds.
const (
	APIChat        = "chat"        // /v1/chat/completions
	APICompletions = "completions" // /v1/completions
	APITGI         = "tgi"         // /generate_stream and /generate
)

// Dataset describes the requests. Synthetic prompts have exactly the drawn
// number of tokens for the mock's tokenizer (internal/tokens);
// prompt files supply real text instead.
type Dataset struct {
	InputTokens  Dist   `yaml:"input_tokens,omitempty"  json:"input_tokens"`
	OutputTokens Dist   `yaml:"output_tokens,omitempty" json:"output_tokens"`
	Prompts      string `yaml:"prompts,omitempty"       json:"prompts,omitempty"` // JSONL or ShareGPT file
	// "jsonl" or "sharegpt"; default from the file
	PromptFormat string `yaml:"prompt_format,omitempty" json:"prompt_format,omitempty"`
	Seed         *int64 `yaml:"seed,omitempty"          json:"seed,omitempty"` // default: the plan's seed
}

// Load is the ladder: closed-loop concurrency steps, then open-loop rate
// steps, each run against every target in turn.
type Load struct {
	Concurrency []int     `yaml:"concurrency,omitempty"   json:"concurrency,omitempty"`
	Rate        []float64 `yaml:"rate,omitempty"          json:"rate,omitempty"` // requests per second
	Arrival     string    `yaml:"arrival,omitempty"       json:"arrival,omitempty"`
	Burstiness  float64   `yaml:"burstiness,omitempty"    json:"burstiness,omitempty"` // gamma shape; 1 = Poisson
	Requests    int       `yaml:"requests,omitempty"      json:"requests,omitempty"`   // per step, after warm-up
	Duration    Duration  `yaml:"duration,omitempty"      json:"duration,omitempty"`   // per step, after warm-up
	Warmup      int       `yaml:"warmup,omitempty"        json:"warmup,omitempty"`     // requests per step marked warm-up
	MaxInFlight int       `yaml:"max_in_flight,omitempty" json:"max_in_flight,omitempty"`
}

// Timeouts bound each request. Zero fields take the defaults shown.
type Timeouts struct {
	Connect Duration `yaml:"connect,omitempty" json:"connect"` // 10s
	Request Duration `yaml:"request,omitempty" json:"request"` // 10m: the whole request
	Idle    Duration `yaml:"idle,omitempty"    json:"idle"`    // 2m: longest wait for the next byte of the stream
	Grace   Duration `yaml:"grace,omitempty"   json:"grace"`   // 10s: after Ctrl-C, before cancelling in-flight requests
}

// TLS configures HTTPS targets.
type TLS struct {
	CAFile             string `yaml:"ca_file,omitempty"              json:"ca_file,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify,omitempty" json:"insecure_skip_verify,omitempty"`
}

// Retry is the opt-in retry policy for 429 responses. A retried request
// keeps its original intended send time, so the wait shows in its latency
// from schedule.
type Retry struct {
	// retries per request; 0 = never retry
	RateLimited int `yaml:"rate_limited,omitempty" json:"rate_limited,omitempty"`
	// cap on one Retry-After wait (default 30s)
	MaxWait Duration `yaml:"max_wait,omitempty"     json:"max_wait,omitempty"`
}

// SLO are the goodput thresholds; zero means no limit on that metric.
type SLO struct {
	TTFT Duration `yaml:"ttft,omitempty" json:"ttft,omitempty"`
	TPOT Duration `yaml:"tpot,omitempty" json:"tpot,omitempty"`
	E2E  Duration `yaml:"e2e,omitempty"  json:"e2e,omitempty"`
}

// StepSpec is an extra, explicitly listed step, run after the ladders; its
// zero fields inherit from Load and Dataset. Scenarios such as long-context
// buckets are lists of these.
type StepSpec struct {
	Scenario     string   `yaml:"scenario"                json:"scenario"`
	Concurrency  int      `yaml:"concurrency,omitempty"   json:"concurrency,omitempty"`
	Rate         float64  `yaml:"rate,omitempty"          json:"rate,omitempty"`
	Requests     int      `yaml:"requests,omitempty"      json:"requests,omitempty"`
	Duration     Duration `yaml:"duration,omitempty"      json:"duration,omitempty"`
	Warmup       *int     `yaml:"warmup,omitempty"        json:"warmup,omitempty"`
	InputTokens  Dist     `yaml:"input_tokens,omitempty"  json:"input_tokens"`
	OutputTokens Dist     `yaml:"output_tokens,omitempty" json:"output_tokens"`
	Stream       *bool    `yaml:"stream,omitempty"        json:"stream,omitempty"`
	Connection   string   `yaml:"connection,omitempty"    json:"connection,omitempty"`
	// closed loop: idle gap before each request (cold start)
	IdleBefore Duration `yaml:"idle_before,omitempty"   json:"idle_before,omitempty"`
}

// Duration is a time.Duration written as "30s" in YAML and JSON.
type Duration time.Duration

// MarshalText writes d as time.Duration's String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses "1m30s", "250ms" and the like.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit, like 30s or 250ms", b)
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// IsZero lets omitempty skip unset durations.
func (d Duration) IsZero() bool { return d == 0 }

// LoadPlan reads and parses a plan file.
func LoadPlan(path string) (Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("plan: %w", err)
	}
	p, err := ParsePlan(b)
	if err != nil {
		return Plan{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// SetDefaults fills unset fields with their defaults; Run calls it too, so
// a Plan built in Go needs only what differs.
func (p *Plan) SetDefaults() {
	p.Scenarios.setDefaults()
	for i := range p.Targets {
		t := &p.Targets[i]
		if t.API == "" {
			t.API = APIChat
		}
		if t.Name == "" {
			t.Name = fmt.Sprintf("target%d", i+1)
		}
		if t.Network != nil {
			t.Network.setDefaults()
		}
	}
	if p.Dataset.InputTokens.IsZero() && p.Dataset.Prompts == "" {
		p.Dataset.InputTokens = Dist{Kind: "fixed", A: 128}
	}
	if p.Dataset.OutputTokens.IsZero() && p.Dataset.Prompts == "" {
		p.Dataset.OutputTokens = Dist{Kind: "fixed", A: 128}
	}
	if p.Dataset.Prompts != "" && p.Dataset.PromptFormat == "" {
		p.Dataset.PromptFormat = "jsonl"
		if strings.HasSuffix(strings.ToLower(p.Dataset.Prompts), ".json") {
			p.Dataset.PromptFormat = "sharegpt"
		}
	}
	if p.Load.Arrival == "" {
		p.Load.Arrival = ArrivalPoisson
	}
	if p.Load.Burstiness == 0 {
		p.Load.Burstiness = 1
	}
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&p.Timeouts.Connect, 10*time.Second)
	def(&p.Timeouts.Request, 10*time.Minute)
	def(&p.Timeouts.Idle, 2*time.Minute)
	def(&p.Timeouts.Grace, 10*time.Second)
	def(&p.Retry.MaxWait, 30*time.Second)
	if p.Connection == "" {
		p.Connection = "reuse"
	}
	if p.HTTP == "" {
		p.HTTP = "1.1"
	}
	if p.Stream == nil {
		t := true
		p.Stream = &t
	}
}

// Streaming reports whether requests stream (the default).
func (p Plan) Streaming() bool { return p.Stream == nil || *p.Stream }

// rule is one validation check: field names what is checked, bad returns
// what is wrong with it, or "".
type rule struct {
	field string
	bad   func(p *Plan) string
}

// targetRule is a rule applied to every target.
type targetRule struct {
	field string
	bad   func(t *Target) string
}

func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return ""
		}
	}
	return fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", "))
}

var planRules = []rule{
	{"scenarios", func(p *Plan) string { return p.Scenarios.problem() }},
	{"shard", func(p *Plan) string { return p.Shard.problem(p) }},
	{"targets", func(p *Plan) string {
		if len(p.Targets) == 0 {
			return "at least one target is needed"
		}
		seen := map[string]bool{}
		for _, t := range p.Targets {
			if seen[t.Name] {
				return fmt.Sprintf("target name %q is used twice", t.Name)
			}
			seen[t.Name] = true
		}
		return ""
	}},
	{"load", func(p *Plan) string {
		if len(p.Load.Concurrency) == 0 && len(p.Load.Rate) == 0 && len(p.Extra) == 0 && p.Scenarios.empty() {
			return "set concurrency, rate or steps: there is nothing to run"
		}
		return ""
	}},
	{"load.concurrency", func(p *Plan) string {
		for _, c := range p.Load.Concurrency {
			if c < 1 || c > 100_000 {
				return fmt.Sprintf("%d is out of range 1..100000", c)
			}
		}
		return ""
	}},
	{"load.rate", func(p *Plan) string {
		for _, r := range p.Load.Rate {
			if !(r > 0) || math.IsInf(r, 0) || r > 1e6 {
				return fmt.Sprintf("%v is not a rate in (0, 1e6] requests/s", r)
			}
		}
		return ""
	}},
	{"load.arrival", func(p *Plan) string {
		return oneOf(p.Load.Arrival, ArrivalConstant, ArrivalPoisson, ArrivalGamma)
	}},
	{"load.burstiness", func(p *Plan) string {
		if !(p.Load.Burstiness > 0) || math.IsInf(p.Load.Burstiness, 0) {
			return fmt.Sprintf("%v must be positive (1 = Poisson, < 1 burstier)", p.Load.Burstiness)
		}
		return ""
	}},
	{"load.requests", func(p *Plan) string {
		if p.Load.Requests < 0 {
			return fmt.Sprintf("%d is negative", p.Load.Requests)
		}
		if p.Load.Requests == 0 && p.Load.Duration == 0 && (len(p.Load.Concurrency) > 0 || len(p.Load.Rate) > 0) {
			return "set requests or duration (or both): a step needs an end"
		}
		return ""
	}},
	{"load.duration", func(p *Plan) string {
		if p.Load.Duration < 0 {
			return "is negative"
		}
		return ""
	}},
	{"load.warmup", func(p *Plan) string {
		if p.Load.Warmup < 0 {
			return fmt.Sprintf("%d is negative", p.Load.Warmup)
		}
		return ""
	}},
	{"load.max_in_flight", func(p *Plan) string {
		if p.Load.MaxInFlight < 0 {
			return fmt.Sprintf("%d is negative (0 means no cap)", p.Load.MaxInFlight)
		}
		return ""
	}},
	{"dataset.prompt_format", func(p *Plan) string {
		if p.Dataset.Prompts == "" {
			return ""
		}
		return oneOf(p.Dataset.PromptFormat, "jsonl", "sharegpt")
	}},
	{"dataset.input_tokens", func(p *Plan) string {
		if p.Dataset.Prompts == "" && p.Dataset.InputTokens.IsZero() {
			return "needed when no prompts file is given"
		}
		return ""
	}},
	{"connection", func(p *Plan) string { return oneOf(p.Connection, "reuse", "new") }},
	{"http", func(p *Plan) string { return oneOf(p.HTTP, "1.1", "2") }},
	{"timeouts", func(p *Plan) string {
		for name, d := range map[string]Duration{"connect": p.Timeouts.Connect, "request": p.Timeouts.Request, "idle": p.Timeouts.Idle, "grace": p.Timeouts.Grace} {
			if d < 0 {
				return name + " is negative"
			}
		}
		return ""
	}},
	{"retry.rate_limited", func(p *Plan) string {
		if p.Retry.RateLimited < 0 || p.Retry.RateLimited > 100 {
			return fmt.Sprintf("%d is out of range 0..100", p.Retry.RateLimited)
		}
		return ""
	}},
	{"slo", func(p *Plan) string {
		if p.SLO.TTFT < 0 || p.SLO.TPOT < 0 || p.SLO.E2E < 0 {
			return "thresholds must not be negative"
		}
		return ""
	}},
	{"steps", func(p *Plan) string {
		for i, s := range p.Extra {
			switch {
			case s.Scenario == "":
				return fmt.Sprintf("[%d].scenario is empty", i)
			case (s.Concurrency > 0) == (s.Rate > 0):
				return fmt.Sprintf("[%d] needs exactly one of concurrency or rate", i)
			case s.Concurrency < 0 || s.Rate < 0 || s.Requests < 0 || s.Duration < 0:
				return fmt.Sprintf("[%d] has a negative value", i)
			case s.Requests == 0 && s.Duration == 0 && p.Load.Requests == 0 && p.Load.Duration == 0:
				return fmt.Sprintf("[%d] needs requests or duration", i)
			case s.Connection != "" && s.Connection != "reuse" && s.Connection != "new":
				return fmt.Sprintf("[%d].connection %q is not reuse or new", i, s.Connection)
			}
		}
		return ""
	}},
}

var targetRules = []targetRule{
	{"url", func(t *Target) string {
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Sprintf("%q is not an http(s) URL with a host", t.URL)
		}
		return ""
	}},
	{"api", func(t *Target) string { return oneOf(t.API, APIChat, APICompletions, APITGI) }},
	{"model", func(t *Target) string {
		if t.Model == "" && t.API != APITGI {
			return "is empty (the OpenAI APIs need a model name)"
		}
		return ""
	}},
	{"name", func(t *Target) string {
		if strings.ContainsAny(t.Name, " \t\n/") {
			return fmt.Sprintf("%q must not contain spaces or slashes", t.Name)
		}
		return ""
	}},
	{"network", func(t *Target) string { return t.Network.problem() }},
	{"api_key_env", func(t *Target) string {
		if t.APIKeyEnv != "" && os.Getenv(t.APIKeyEnv) == "" {
			return fmt.Sprintf("environment variable %s is not set", t.APIKeyEnv)
		}
		return ""
	}},
}

// Validate checks every rule and returns all violations at once, each
// naming its field, e.g. `plan: targets[1].url: "x" is not an http(s) URL`.
func (p *Plan) Validate() error {
	var errs []error
	for _, pr := range p.problems() {
		errs = append(errs, fmt.Errorf("plan: %s: %s", pr.field, pr.msg))
	}
	return errors.Join(errs...)
}

// problem is one broken rule: the field's path and what is wrong.
type problem struct{ field, msg string }

// problems checks every rule.
func (p *Plan) problems() []problem {
	var out []problem
	for _, r := range planRules {
		if msg := r.bad(p); msg != "" {
			out = append(out, problem{r.field, msg})
		}
	}
	for i := range p.Targets {
		for _, r := range targetRules {
			if msg := r.bad(&p.Targets[i]); msg != "" {
				out = append(out, problem{fmt.Sprintf("targets[%d].%s", i, r.field), msg})
			}
		}
	}
	return out
}

// Step is one resolved step of a run: one target at one load level.
type Step struct {
	Index        int
	Target       Target
	Scenario     string
	Concurrency  int     // closed loop when > 0
	Rate         float64 // open loop when > 0
	Arrival      string
	Burstiness   float64
	Requests     int           // measured requests; 0 = bounded by Duration
	Duration     time.Duration // measured phase; 0 = bounded by Requests
	Warmup       int
	MaxInFlight  int
	InputTokens  Dist
	OutputTokens Dist
	Seed         uint64        // the step's dataset and pacer seed
	Stream       bool          // stream responses (the plan's stream setting unless a scenario overrides it)
	Connection   string        // "reuse" or "new" (the plan's setting unless a scenario overrides it)
	IdleBefore   time.Duration // closed loop: each worker waits this long before each request (cold start)
}

// Label names the step for people, e.g. "mock c=10" or "mock r=20/s".
func (s Step) Label() string {
	return s.Target.Name + " " + results.StepLabel(s.Scenario, s.Concurrency, s.Rate)
}

// Steps expands the plan into its steps, in run order: each load level in
// turn, every target at that level one after the other, so targets being
// compared see the same hour of the day.
func (p Plan) Steps() []Step {
	seed := p.Seed
	if p.Dataset.Seed != nil {
		seed = *p.Dataset.Seed
	}
	base := Step{
		Arrival: p.Load.Arrival, Burstiness: p.Load.Burstiness,
		Requests: p.Load.Requests, Duration: p.Load.Duration.D(), Warmup: p.Load.Warmup,
		MaxInFlight: p.Load.MaxInFlight, InputTokens: p.Dataset.InputTokens, OutputTokens: p.Dataset.OutputTokens,
		Stream: p.Streaming(), Connection: p.Connection,
	}
	var levels []Step
	for _, c := range p.Load.Concurrency {
		s := base
		s.Scenario, s.Concurrency = "concurrency", c
		levels = append(levels, s)
	}
	for _, r := range p.Load.Rate {
		s := base
		s.Scenario, s.Rate = "rate", r
		levels = append(levels, s)
	}
	for _, e := range append(append([]StepSpec(nil), p.Extra...), p.Scenarios.steps()...) {
		s := base
		s.IdleBefore = e.IdleBefore.D()
		s.Scenario = e.Scenario
		s.Concurrency = e.Concurrency
		s.Rate = e.Rate
		if e.Requests > 0 || e.Duration > 0 {
			s.Requests, s.Duration = e.Requests, e.Duration.D()
		}
		if e.Warmup != nil {
			s.Warmup = *e.Warmup
		}
		if !e.InputTokens.IsZero() {
			s.InputTokens = e.InputTokens
		}
		if !e.OutputTokens.IsZero() {
			s.OutputTokens = e.OutputTokens
		}
		if e.Stream != nil {
			s.Stream = *e.Stream
		}
		if e.Connection != "" {
			s.Connection = e.Connection
		}
		levels = append(levels, s)
	}
	var steps []Step
	for li, l := range levels {
		for _, t := range p.Targets {
			s := l
			s.Index, s.Target = len(steps), t
			// Every target at one level gets the same seed, hence the same
			// requests: comparisons run on identical samples.
			s.Seed = uint64(seed)*1_000_003 + uint64(li)
			steps = append(steps, s)
		}
	}
	return steps
}
