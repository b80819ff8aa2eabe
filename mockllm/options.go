package mockllm

import (
	"io"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// Option configures New.
type Option func(*config)

type config struct {
	profile      engine.Profile
	haveProfile  bool
	sched        engine.Scheduler
	model        string
	seed         int64
	apiKey       string
	faults       FaultConfig
	limits       LimitConfig
	answerMin    int
	answerMax    int
	truthCap     int
	maxBody      int64
	wallClock    func() time.Time
	startupDelay *time.Duration
	coarseTimers bool
	warnings     io.Writer
}

// Defaults of New.
const (
	// DefaultModel is the served model name when WithModel is not given.
	DefaultModel = "testbed-mock"
	// DefaultTruthCapacity is how many requests' ground truth the server
	// keeps before evicting the oldest.
	DefaultTruthCapacity = 100_000
	// DefaultMaxBodyBytes bounds a request body; larger bodies get 413.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultAnswerMin and DefaultAnswerMax bound the natural answer length
	// (see WithAnswerLength).
	DefaultAnswerMin = 256
	DefaultAnswerMax = 1024
)

// WithProfile sets the cost model (default: the "ideal" preset). Its
// MaxModelLen is enforced with vLLM's 400 and its StartupDelay makes
// /health answer 503 for that long after New.
func WithProfile(p engine.Profile) Option {
	return func(c *config) { c.profile, c.haveProfile = p, true }
}

// WithScheduler makes the server use sched instead of building one from the
// profile (which still supplies MaxModelLen and StartupDelay). The server
// closes sched on Close.
func WithScheduler(sched engine.Scheduler) Option {
	return func(c *config) { c.sched = sched }
}

// WithModel sets the one served model name; requests naming another model
// get 404. An empty model field in a request means this model.
func WithModel(name string) Option {
	return func(c *config) {
		if name != "" {
			c.model = name
		}
	}
}

// WithSeed seeds everything random in the server: generated text, answer
// lengths, fault draws, generated request ids, engine jitter. Equal seeds
// and equal requests (and request ids) give equal responses.
func WithSeed(seed int64) Option {
	return func(c *config) { c.seed = seed }
}

// WithAPIKey requires "Authorization: Bearer KEY" on every endpoint but
// /health and /metrics, which stay open as on vLLM so that monitoring
// needs no key: the model endpoints (/v1/*, /generate, /generate_stream),
// /info and the ground truth (/testbed/requests). The key is compared in
// constant time. Empty disables it.
func WithAPIKey(key string) Option {
	return func(c *config) { c.apiKey = key }
}

// WithFaults injects faults (see FaultConfig).
func WithFaults(f FaultConfig) Option {
	return func(c *config) { c.faults = f }
}

// WithLimits sets rate and concurrency limits (see LimitConfig).
func WithLimits(l LimitConfig) Option {
	return func(c *config) { c.limits = l }
}

// WithAnswerLength sets the range of the natural answer length: the number
// of tokens after which the modelled model emits its end-of-sequence token.
// Each request's length is drawn uniformly from [min, max] by a hash of the
// server seed, the request's own "seed" field and its prompt, so the same
// request always gets the same answer. A request stops there with
// finish_reason "stop" unless max_tokens comes first ("length") or
// ignore_eos is set; min_tokens raises it. Defaults 256..1024.
func WithAnswerLength(min, max int) Option {
	return func(c *config) { c.answerMin, c.answerMax = min, max }
}

// WithTruthCapacity bounds the ground-truth store (default
// DefaultTruthCapacity); the oldest entries are evicted and counted.
func WithTruthCapacity(n int) Option {
	return func(c *config) { c.truthCap = n }
}

// WithMaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes).
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) { c.maxBody = n }
}

// WithWallClock sets the source of the "created" timestamps in responses
// (default time.Now). Golden tests fix it; timing never uses it.
func WithWallClock(now func() time.Time) Option {
	return func(c *config) { c.wallClock = now }
}

// WithStartupDelay overrides the profile's StartupDelay.
func WithStartupDelay(d time.Duration) Option {
	return func(c *config) { c.startupDelay = &d }
}

// WithPreciseTimers turns the precise waker on (the default) or off. The
// waker (internal/wake) wakes streams from one goroutine that waits on a
// Linux timerfd in the runtime's network poller, because the runtime's own
// timers can fire up to a millisecond late when the process is idle. It
// serves only while at most 512 requests are generating; above that the
// runtime's timers are on time and spread better. Turn it off to run the
// server inside a testing/synctest bubble, where only runtime timers
// follow the virtual clock.
func WithPreciseTimers(on bool) Option {
	return func(c *config) { c.coarseTimers = !on }
}

// WithWarnings sets where the server writes warnings about how it is
// driven, such as a load outside the range its fitted profile states
// (default os.Stderr; nil silences them, the metrics still count).
func WithWarnings(w io.Writer) Option {
	return func(c *config) { c.warnings = w }
}

// LimitConfig holds throttling limits. The zero value limits nothing.
type LimitConfig struct {
	// RPM is requests per minute: a token bucket of RPM requests that
	// refills continuously at RPM/60 per second, as OpenAI meters.
	RPM int
	// TPM is tokens per minute, metered like RPM; a request costs its
	// prompt tokens plus its max_tokens (the maximum it may generate),
	// which is how OpenAI estimates a request before running it.
	TPM int
	// MaxConcurrency caps requests in flight on the model endpoints;
	// beyond it the server answers TGI's 429 "Model is overloaded".
	MaxConcurrency int
}
