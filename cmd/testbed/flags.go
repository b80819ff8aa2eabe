package main

import (
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/history"
	"github.com/llm-testbed/testbed/harness/serverside"
	"github.com/llm-testbed/testbed/netem"
)

// The flag types of every subcommand: values as users type them.

// intList is a flag like "1,5,10".
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// floatList is a flag like "10,20.5".
type floatList []float64

func (l *floatList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *floatList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(n > 0) {
			return fmt.Errorf("%q is not a positive number", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// durationFlag is a harness.Duration as a flag.
type durationFlag struct{ d *harness.Duration }

// String is empty for an unset duration, so help text shows only the
// default its usage line states ("(default 10m)"), not a second "0s".
func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.D().String()
}
func (f durationFlag) Set(v string) error { return f.d.UnmarshalText([]byte(v)) }

// rateFlag parses a tc-style rate ("10mbit") into bytes per second.
type rateFlag struct{ v *float64 }

// String is "0" for unlimited and empty when unset (negative: "use
// --bandwidth"), which help text then does not print as a default.
func (f rateFlag) String() string {
	if f.v == nil || *f.v < 0 {
		return ""
	}
	if *f.v == 0 {
		return "0"
	}
	return fmt.Sprintf("%gbit", *f.v*8)
}
func (f rateFlag) Set(s string) error {
	v, err := netem.ParseRate(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// samplingFlags are bench's flags for the plan's server_metrics and gpu
// sections, so quick runs get the server-side timeline too.
type samplingFlags struct {
	urls     stringList
	nvml     bool
	interval time.Duration
}

func (f *samplingFlags) register(fs *flag.FlagSet) {
	fs.Var(
		&f.urls,
		"server-metrics",
		"a /metrics URL (vLLM, TGI, DCGM exporter) to scrape during the run into server_metrics.jsonl (repeatable)",
	)
	fs.BoolVar(&f.nvml, "nvml", false, "read the local GPUs through NVML during the run into gpu.jsonl")
	fs.DurationVar(
		&f.interval,
		"sample-interval",
		serverside.DefaultInterval,
		"period of --server-metrics and --nvml sampling",
	)
}

// apply sets the plan's sampling sections from the flags.
func (f *samplingFlags) apply(p *harness.Plan) {
	if len(f.urls) > 0 {
		p.ServerMetrics = &harness.ServerMetrics{URLs: f.urls, Interval: harness.Duration(f.interval)}
	}
	if f.nvml {
		p.GPU = &harness.GPUSampling{NVML: true, Interval: harness.Duration(f.interval)}
	}
}

// serverTimeouts are the timeouts of a server people leave running (the
// mock, gpu-agent): without them, idle keep-alive connections and clients
// sending a byte a second are held for ever.
type serverTimeouts struct {
	readHeader, read, idle time.Duration
}

// register adds --http-read-header-timeout, --http-read-timeout and
// --http-idle-timeout. Streaming responses are not bounded: a stream's
// length is the model's, not the client's doing.
func (t *serverTimeouts) register(fs *flag.FlagSet) {
	fs.DurationVar(
		&t.readHeader,
		"http-read-header-timeout",
		10*time.Second,
		"time allowed to read a request's headers",
	)
	fs.DurationVar(&t.read, "http-read-timeout", time.Minute, "time allowed to read a whole request, body included")
	fs.DurationVar(&t.idle, "http-idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept")
}

// server is an http.Server with these timeouts, serving HTTP/1.1 and
// HTTP/2: over TLS when the listener is (ALPN), and without TLS with prior
// knowledge (h2c), as `bench --http 2` speaks to an http:// URL.
func (t serverTimeouts) server(h http.Handler) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		IdleTimeout:       t.idle,
		Protocols:         &protos,
	}
}

// labelList is a repeatable KEY=VALUE flag.
type labelList struct{ m map[string]string }

func (l *labelList) String() string {
	var s []string
	for k, v := range l.m {
		s = append(s, k+"="+v)
	}
	return strings.Join(s, ",")
}

func (l *labelList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE, e.g. image=vllm/vllm-openai:v0.6.3", v)
	}
	if l.m == nil {
		l.m = map[string]string{}
	}
	l.m[k] = strings.TrimSpace(val)
	return nil
}

// rulesFlags are the regression rules of compare and --baseline.
type rulesFlags struct {
	metrics    string
	minEffect  string
	confidence float64
}

func (f *rulesFlags) register(fs *flag.FlagSet) {
	def := history.DefaultRules()
	fs.StringVar(
		&f.metrics,
		"metrics",
		strings.Join(def.Metrics, ","),
		"metrics to judge, e.g. ttft_p50,e2e_p99,itl_mean",
	)
	fs.StringVar(
		&f.minEffect,
		"min-effect",
		fmt.Sprintf("%g%%", 100*def.MinEffect),
		"smallest relative change that counts, e.g. 5% or 0.05",
	)
	fs.Float64Var(&f.confidence, "confidence", def.Confidence, "confidence of the change's interval")
}

func (f *rulesFlags) rules() (history.Rules, error) {
	r := history.DefaultRules()
	r.Metrics = nil
	for _, m := range strings.Split(f.metrics, ",") {
		if m = strings.TrimSpace(m); m != "" {
			r.Metrics = append(r.Metrics, m)
		}
	}
	eff, err := history.ParseShare(f.minEffect)
	if err != nil {
		return r, fmt.Errorf("--min-effect %w", err)
	}
	r.MinEffect = eff
	r.Confidence = f.confidence
	return r, r.Validate()
}

// shardFlag is run's --shard I/N (or auto/N).
type shardFlag struct{ s *harness.Shard }

func (f *shardFlag) String() string {
	if f.s == nil {
		return ""
	}
	return f.s.String()
}

func (f *shardFlag) Set(v string) error {
	s, err := harness.ParseShard(v)
	if err != nil {
		return err
	}
	f.s = &s
	return nil
}

// apply puts the flags into the plan, over its shard section; the plan is
// validated again, since the shard count constrains the steps.
func (f *shardFlag) apply(p *harness.Plan, coordinator string) error {
	switch {
	case f.s != nil:
		s := *f.s
		if p.Shard != nil {
			s.BarrierTimeout = p.Shard.BarrierTimeout
			s.Coordinator = p.Shard.Coordinator
		}
		p.Shard = &s
	case coordinator != "" && p.Shard == nil:
		return fmt.Errorf("--coordinator needs --shard (or a shard section in the plan): %w", errUsage)
	}
	if coordinator != "" {
		p.Shard.Coordinator = coordinator
	}
	if p.Shard == nil {
		return nil
	}
	return p.Validate()
}
