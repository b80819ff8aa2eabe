package harness

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario names, as they appear in records and summaries. The ladders
// ("concurrency", "rate") come from Load; the others from Plan.Scenarios,
// and analysis and reports recognise them by these names.
const (
	ScenarioConcurrency  = "concurrency"   // closed-loop concurrency ladder
	ScenarioRate         = "rate"          // open-loop rate ladder
	ScenarioColdStart    = "cold_start"    // one request after an idle gap, repeated
	ScenarioWarm         = "warm"          // the same requests back to back: cold start's reference
	ScenarioLongContext  = "long_context"  // one step per input-length bucket
	ScenarioStreaming    = "streaming"     // streaming half of the streaming comparison
	ScenarioNonStreaming = "non_streaming" // non-streaming half
	ScenarioConnReuse    = "conn_reuse"    // keep-alive connections
	ScenarioConnNew      = "conn_new"      // a new connection (and TLS handshake) per request
	ScenarioShortOutput  = "short_output"  // request throughput: short outputs
	ScenarioLongOutput   = "long_output"   // token throughput: long outputs
)

// Scenarios are the methodology's measurements beyond the load ladders,
// each expanded into explicit steps that run after the ladders, every
// target in turn at each step (so compared targets share the same window
// and the same requests). A nil scenario is not run.
//
//	scenarios:
//	  cold_start: {idle: 30s, requests: 10}
//	  long_context: {buckets: [2048, 4096, 8192, 16384, 32768], requests: 30}
//	  streaming: {concurrency: 4, requests: 100}
//	  connection: {concurrency: 4, requests: 100}
//	  throughput_split: {short_output: 16, long_output: 1024, concurrency: 16, requests: 200}
type Scenarios struct {
	ColdStart   *ColdStartScenario   `yaml:"cold_start,omitempty"       json:"cold_start,omitempty"`
	LongContext *LongContextScenario `yaml:"long_context,omitempty"     json:"long_context,omitempty"`
	Streaming   *PairScenario        `yaml:"streaming,omitempty"        json:"streaming,omitempty"`
	Connection  *PairScenario        `yaml:"connection,omitempty"       json:"connection,omitempty"`
	Throughput  *ThroughputScenario  `yaml:"throughput_split,omitempty" json:"throughput_split,omitempty"`
}

// ColdStartScenario measures the first request after an idle period: each
// of Requests requests waits Idle with nothing in flight, then goes alone.
// WarmRequests then run back to back at concurrency 1 as the warm
// reference. Idle must exceed the server's idle timeout (scale-to-zero,
// model unload) for the requests to be cold.
type ColdStartScenario struct {
	Idle         Duration `yaml:"idle"                    json:"idle"`
	Requests     int      `yaml:"requests,omitempty"      json:"requests"`      // default 10
	WarmRequests int      `yaml:"warm_requests,omitempty" json:"warm_requests"` // default 30
}

// LongContextScenario runs one step per input length bucket with short
// outputs, so TTFT (prefill) is what differs. Prompts have exactly the
// bucket's length for the mock's tokenizer. For a real server,
// MeasureTokenizer measures its tokenizer first (sizeprompts.go) and sizes prompts
// so the server counts the bucket's tokens; either way the report labels
// buckets with the prompt_tokens the server reported.
type LongContextScenario struct {
	// input tokens; default 2K, 4K, 8K, 16K, 32K
	Buckets      []int `yaml:"buckets,omitempty"           json:"buckets"`
	Requests     int   `yaml:"requests,omitempty"          json:"requests"`      // per bucket; default 30
	OutputTokens int   `yaml:"output_tokens,omitempty"     json:"output_tokens"` // default 32
	Concurrency  int   `yaml:"concurrency,omitempty"       json:"concurrency"`   // default 1
	Warmup       int   `yaml:"warmup,omitempty"            json:"warmup"`        // per bucket; default 1
	// MeasureTokenizer probes the first target before the run for its
	// prompt tokens per word (Scale) and template overhead (Overhead).
	MeasureTokenizer bool `yaml:"measure_tokenizer,omitempty" json:"measure_tokenizer,omitempty"`
	// Scale and Overhead map words to server tokens: tokens = Overhead +
	// Scale × words. Set by MeasureTokenizer (and kept in run.json, so a rerun
	// sends the same text), or by hand; 0 means one token per word.
	Scale    float64 `yaml:"scale,omitempty"             json:"scale,omitempty"`
	Overhead float64 `yaml:"overhead,omitempty"          json:"overhead,omitempty"`
}

// PairScenario runs the same load twice, changing one thing: streaming on
// and off, or connections kept alive and new per request.
type PairScenario struct {
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency"` // default 4
	Requests    int `yaml:"requests,omitempty"    json:"requests"`    // per half; default 100
}

// ThroughputScenario splits throughput as the methodology asks: request
// throughput with short outputs, token throughput with long ones.
type ThroughputScenario struct {
	ShortOutput int `yaml:"short_output,omitempty" json:"short_output"` // tokens; default 16
	LongOutput  int `yaml:"long_output,omitempty"  json:"long_output"`  // tokens; default 1024
	Concurrency int `yaml:"concurrency,omitempty"  json:"concurrency"`  // default 16
	Requests    int `yaml:"requests,omitempty"     json:"requests"`     // per half; default 200
}

// DefaultContextBuckets are the long-context input lengths run when a plan
// names none.
var DefaultContextBuckets = []int{2048, 4096, 8192, 16384, 32768}

// setDefaults fills unset fields; Plan.SetDefaults calls it so run.json
// shows every value a scenario ran with.
func (s *Scenarios) setDefaults() {
	if s == nil {
		return
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c := s.ColdStart; c != nil {
		def(&c.Requests, 10)
		def(&c.WarmRequests, 30)
	}
	if c := s.LongContext; c != nil {
		if len(c.Buckets) == 0 {
			c.Buckets = append([]int(nil), DefaultContextBuckets...)
		}
		def(&c.Requests, 30)
		def(&c.OutputTokens, 32)
		def(&c.Concurrency, 1)
		def(&c.Warmup, 1)
	}
	for _, c := range []*PairScenario{s.Streaming, s.Connection} {
		if c != nil {
			def(&c.Concurrency, 4)
			def(&c.Requests, 100)
		}
	}
	if c := s.Throughput; c != nil {
		def(&c.ShortOutput, 16)
		def(&c.LongOutput, 1024)
		def(&c.Concurrency, 16)
		def(&c.Requests, 200)
	}
}

func (s *Scenarios) empty() bool {
	return s == nil ||
		(s.ColdStart == nil && s.LongContext == nil && s.Streaming == nil && s.Connection == nil && s.Throughput == nil)
}

// problem returns what is wrong with the scenarios, naming the field, or "".
func (s *Scenarios) problem() string {
	if s == nil {
		return ""
	}
	var bad []string
	neg := func(field string, v int) {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("%s: %d is negative", field, v))
		}
	}
	if c := s.ColdStart; c != nil {
		if c.Idle <= 0 {
			bad = append(
				bad,
				"cold_start.idle: set the idle gap before each cold request, e.g. 30s (longer than the server's idle timeout)",
			)
		}
		neg("cold_start.requests", c.Requests)
		neg("cold_start.warm_requests", c.WarmRequests)
	}
	if c := s.LongContext; c != nil {
		for i, b := range c.Buckets {
			if b < 1 {
				bad = append(bad, fmt.Sprintf("long_context.buckets[%d]: %d is not a positive token count", i, b))
			}
		}
		neg("long_context.requests", c.Requests)
		neg("long_context.output_tokens", c.OutputTokens)
		neg("long_context.concurrency", c.Concurrency)
		neg("long_context.warmup", c.Warmup)
		if c.Scale < 0 {
			bad = append(bad, fmt.Sprintf("long_context.scale: %v is negative", c.Scale))
		}
	}
	for name, c := range map[string]*PairScenario{"streaming": s.Streaming, "connection": s.Connection} {
		if c != nil {
			neg(name+".concurrency", c.Concurrency)
			neg(name+".requests", c.Requests)
		}
	}
	if c := s.Throughput; c != nil {
		neg("throughput_split.short_output", c.ShortOutput)
		neg("throughput_split.long_output", c.LongOutput)
		neg("throughput_split.concurrency", c.Concurrency)
		neg("throughput_split.requests", c.Requests)
		if c.ShortOutput > 0 && c.LongOutput > 0 && c.ShortOutput >= c.LongOutput {
			bad = append(
				bad,
				fmt.Sprintf(
					"throughput_split: short_output %d must be below long_output %d",
					c.ShortOutput,
					c.LongOutput,
				),
			)
		}
	}
	return strings.Join(bad, "; ")
}

// steps expands the scenarios into explicit steps, in a fixed order. The
// values are the defaults-filled ones (Plan.SetDefaults runs first).
func (s *Scenarios) steps() []StepSpec {
	if s == nil {
		return nil
	}
	var out []StepSpec
	zero, one := 0, 1
	fixed := func(n int) Dist { return Dist{Kind: "fixed", A: float64(n)} }
	yes, no := true, false
	if c := s.ColdStart; c != nil {
		out = append(
			out,
			StepSpec{
				Scenario:    ScenarioColdStart,
				Concurrency: 1,
				Requests:    c.Requests,
				Warmup:      &zero,
				IdleBefore:  c.Idle,
			},
			StepSpec{Scenario: ScenarioWarm, Concurrency: 1, Requests: c.WarmRequests, Warmup: &one},
		)
	}
	if c := s.LongContext; c != nil {
		w := c.Warmup
		for _, b := range c.Buckets {
			out = append(out, StepSpec{Scenario: ScenarioLongContext, Concurrency: c.Concurrency, Requests: c.Requests,
				Warmup: &w, InputTokens: fixed(c.bucketWords(b)), OutputTokens: fixed(c.OutputTokens)})
		}
	}
	if c := s.Streaming; c != nil {
		out = append(out,
			StepSpec{Scenario: ScenarioStreaming, Concurrency: c.Concurrency, Requests: c.Requests, Stream: &yes},
			StepSpec{Scenario: ScenarioNonStreaming, Concurrency: c.Concurrency, Requests: c.Requests, Stream: &no})
	}
	if c := s.Connection; c != nil {
		out = append(
			out,
			StepSpec{
				Scenario:    ScenarioConnReuse,
				Concurrency: c.Concurrency,
				Requests:    c.Requests,
				Connection:  "reuse",
			},
			StepSpec{Scenario: ScenarioConnNew, Concurrency: c.Concurrency, Requests: c.Requests, Connection: "new"},
		)
	}
	if c := s.Throughput; c != nil {
		out = append(
			out,
			StepSpec{
				Scenario:     ScenarioShortOutput,
				Concurrency:  c.Concurrency,
				Requests:     c.Requests,
				OutputTokens: fixed(c.ShortOutput),
			},
			StepSpec{
				Scenario:     ScenarioLongOutput,
				Concurrency:  c.Concurrency,
				Requests:     c.Requests,
				OutputTokens: fixed(c.LongOutput),
			},
		)
	}
	return out
}

// waitIdle waits d (the cold-start scenario's idle gap) and reports
// whether it did; false means ctx ended first. The request's intended send
// time is taken after the wait: the idle gap is the scenario, not queueing.
func waitIdle(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
