package mockllm

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llm-testbed/testbed/internal/wake"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func init() {
	// gin's mode is global; release mode keeps it from printing per route.
	gin.SetMode(gin.ReleaseMode)
}

// Server is the mock: an http.Handler serving the OpenAI and TGI APIs from
// an engine.Scheduler. Create it with New and Close it when done.
type Server struct {
	cfg     config
	model   string
	profile engine.Profile
	sched   engine.Scheduler
	router  *gin.Engine
	clock   truthClock
	readyAt time.Time
	lim     limitsForDecode
	limiter *limiter
	truth   *truthStore
	metrics *metrics
	watch   *validityWatch
	waker   *wake.Waker // nil with WithPreciseTimers(false)
	idSeq   atomic.Uint64
	created func() int64

	inflight atomic.Int64 // model requests being served, for MaxConcurrency
	streams  atomic.Int64 // requests emitting tokens, to pick how they sleep

	mu       sync.Mutex
	draining bool
	active   int             // requests admitted to generation
	idle     chan struct{}   // closed when active drops to 0 while draining
	abortCtx context.Context // cancelled to end every stream now
	abortFn  context.CancelFunc
}

// New builds a server. Without options it serves DefaultModel with the
// "ideal" profile (fixed 100 ms TTFT, 20 ms ITL), no limits and no faults.
func New(opts ...Option) (*Server, error) {
	cfg := config{model: DefaultModel, truthCap: DefaultTruthCapacity, maxBody: DefaultMaxBodyBytes,
		answerMin: DefaultAnswerMin, answerMax: DefaultAnswerMax, wallClock: time.Now, warnings: os.Stderr}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.haveProfile {
		p, err := engine.Preset("ideal")
		if err != nil {
			return nil, err
		}
		cfg.profile = p
	}
	if err := validateConfig(&cfg); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, model: cfg.model, profile: cfg.profile, sched: cfg.sched}
	s.abortCtx, s.abortFn = context.WithCancel(context.Background())
	if s.sched == nil {
		sched, err := engine.New(cfg.profile, engine.WithSeed(cfg.seed))
		if err != nil {
			return nil, fmt.Errorf("mockllm: %w", err)
		}
		s.sched = sched
	}
	start := time.Now()
	s.clock = truthClock{start: start}
	delay := cfg.profile.StartupDelay
	if cfg.startupDelay != nil {
		delay = *cfg.startupDelay
	}
	s.readyAt = start.Add(delay)
	s.lim = limitsForDecode{model: cfg.model, maxModelLen: cfg.profile.MaxModelLen, seed: cfg.seed,
		answerMin: cfg.answerMin, answerMax: cfg.answerMax}
	s.limiter = newLimiter(cfg.limits, start)
	s.truth = newTruthStore(cfg.truthCap)
	s.created = func() int64 { return cfg.wallClock().Unix() }
	s.metrics = newMetrics(s)
	s.watch = newValidityWatch(cfg.profile.Validity, cfg.warnings, s.metrics.reg)
	s.router = s.routes()
	if !cfg.coarseTimers {
		s.waker = wake.New()
	}
	return s, nil
}

// validateConfig checks the options New cannot fix, naming the bad one.
func validateConfig(c *config) error {
	rate := func(name string, v float64) error {
		if v < 0 || v > 1 || v != v {
			return fmt.Errorf("mockllm: faults: %s must be in [0, 1], got %v", name, v)
		}
		return nil
	}
	f := c.faults
	checks := []error{
		rate("server_error_rate", f.ServerErrorRate), rate("rate_limit_rate", f.RateLimitRate),
		rate("stream_cut_rate", f.StreamCutRate), rate("stall_rate", f.StallRate),
	}
	type rule struct {
		bad bool
		msg string
	}
	for _, r := range []rule{
		{f.StreamCutAfter < 0, fmt.Sprintf("faults: stream_cut_after must be >= 0, got %d", f.StreamCutAfter)},
		{f.StallDuration < 0, fmt.Sprintf("faults: stall_duration must be >= 0, got %v", f.StallDuration)},
		{f.TokensPerEvent < 0, fmt.Sprintf("faults: tokens_per_event must be >= 0, got %d", f.TokensPerEvent)},
		{f.PacingInterval < 0, fmt.Sprintf("faults: pacing_interval must be >= 0, got %v", f.PacingInterval)},
		{f.RetryAfter < 0, fmt.Sprintf("faults: retry_after must be >= 0, got %v", f.RetryAfter)},
		{c.limits.RPM < 0, fmt.Sprintf("limits: rpm must be >= 0, got %d", c.limits.RPM)},
		{c.limits.TPM < 0, fmt.Sprintf("limits: tpm must be >= 0, got %d", c.limits.TPM)},
		{c.limits.MaxConcurrency < 0, fmt.Sprintf("limits: max_concurrency must be >= 0, got %d", c.limits.MaxConcurrency)},
		{c.answerMin < 1 || c.answerMax < c.answerMin,
			fmt.Sprintf("answer length: want 1 <= min <= max, got %d..%d", c.answerMin, c.answerMax)},
		{c.truthCap < 1, fmt.Sprintf("truth capacity must be >= 1, got %d", c.truthCap)},
		{c.maxBody < 1, fmt.Sprintf("max body bytes must be >= 1, got %d", c.maxBody)},
		{c.startupDelay != nil && *c.startupDelay < 0, "startup delay must be >= 0"},
	} {
		if r.bad {
			checks = append(checks, errors.New("mockllm: "+r.msg))
		}
	}
	return errors.Join(checks...)
}

// ServeHTTP serves the mock's API.
//
// A trailing slash is ignored (POST /v1/chat/completions/ is
// /v1/chat/completions): a redirect would make clients resend the body,
// and many drop it on a 307.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		r.URL.Path = strings.TrimRight(p, "/")
		if r.URL.Path == "" {
			r.URL.Path = "/"
		}
		r.URL.RawPath = ""
	}
	s.router.ServeHTTP(w, r)
}

// Truth returns the ground truth of request id (its x-request-id), once the
// request has finished or written its last token.
func (s *Server) Truth(id string) (Truth, bool) { return s.truth.get(id) }

// Truths returns every stored truth, oldest first, and how many older ones
// were evicted from the bounded store.
func (s *Server) Truths() ([]Truth, uint64) { return s.truth.all() }

// Since converts a time to the Truth time base (ns since New).
func (s *Server) Since(t time.Time) int64 { return s.clock.ns(t) }

// Gatherer is the server's Prometheus registry (what /metrics serves), for
// in-process readers such as benchmarks.
func (s *Server) Gatherer() prometheus.Gatherer { return s.metrics.reg }

// Drain stops admitting requests (they get 503) and waits for in-flight
// ones to finish. When ctx ends first, the remaining streams are ended at
// once with an error event, and Drain returns ctx.Err() after they have.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	if s.active == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	s.abortFn()
	<-idle
	return ctx.Err()
}

// Close ends every stream at once (with an error event), refuses new
// requests and stops the scheduler and the precise waker's goroutine. It
// does not wait for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.abortFn()
	s.sched.Close()
	if s.waker != nil {
		s.waker.Close()
	}
}

// admit counts a request into the generation phase, unless draining.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.active++
	return true
}

func (s *Server) release() {
	s.mu.Lock()
	s.active--
	if s.active == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
}

func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false // ServeHTTP trims it instead
	r.Use(s.requestID, recovery)
	r.POST("/v1/chat/completions", s.generate(apiChat, false))
	r.POST("/v1/completions", s.generate(apiCompletions, false))
	r.POST("/generate", s.generate(apiTGI, false))
	r.POST("/generate_stream", s.generate(apiTGI, true))
	r.GET("/v1/models", s.authorized(s.models))
	r.GET("/health", s.health)
	// With an API key, only /health and /metrics stay open, as on vLLM
	// (whose key guards the /v1 routes alone): a monitoring system
	// scrapes without the key. /info and the ground truth need it.
	r.GET("/info", s.authorized(s.info))
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	r.GET("/metrics", gin.WrapH(metrics))
	r.GET("/testbed/requests", s.authorized(s.listTruth))
	r.GET("/testbed/requests/:id", s.authorized(s.getTruth))
	r.NoRoute(func(c *gin.Context) {
		e := notFound(fmt.Sprintf("no route %s %s", c.Request.Method, c.Request.URL.Path))
		writeAPIError(c.Writer, pathAPI(c.Request.URL.Path), e)
	})
	r.NoMethod(func(c *gin.Context) {
		writeAPIError(c.Writer, pathAPI(c.Request.URL.Path), &apiError{status: http.StatusMethodNotAllowed,
			typ: "MethodNotAllowedError", code: http.StatusMethodNotAllowed, tgiType: "method_not_allowed",
			message: fmt.Sprintf("method %s not allowed on %s", c.Request.Method, c.Request.URL.Path)})
	})
	return r
}

const requestIDKey = "x-request-id"

// requestID puts x-request-id on every response: the client's own when it
// sent one (so a harness can pre-assign ids), else a generated one.
func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader(requestIDKey)
	if id == "" || len(id) > 256 {
		n := s.idSeq.Add(1)
		id = fmt.Sprintf("%016x%016x", mix64(uint64(s.cfg.seed), n), mix64(uint64(s.cfg.seed)^0xabcdef, n))
	}
	c.Writer.Header().Set(requestIDKey, id)
	c.Next()
}

func rid(c *gin.Context) string { return c.Writer.Header().Get(requestIDKey) }

// recovery turns a handler panic into a 500 rather than a dropped
// connection, except http.ErrAbortHandler, which is how a stream cut is
// made on purpose.
func recovery(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			if !c.Writer.Written() {
				writeAPIError(
					c.Writer,
					apiChat,
					&apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
						code: http.StatusInternalServerError, message: fmt.Sprintf("internal error: %v", v)},
				)
			}
			c.Abort()
		}
	}()
	c.Next()
}

// pathAPI is the API whose error shape a path's errors take: TGI's for
// TGI's routes, OpenAI's for the rest.
func pathAPI(path string) string {
	if strings.HasPrefix(path, "/generate") || path == "/info" {
		return apiTGI
	}
	return apiChat
}

// checkAuth enforces the API key, if any, in constant time so the
// comparison does not leak how much of a guess was right.
func (s *Server) checkAuth(c *gin.Context) *apiError {
	if s.cfg.apiKey == "" {
		return nil
	}
	auth := c.GetHeader("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.apiKey)) == 1 {
		return nil
	}
	return &apiError{status: http.StatusUnauthorized, typ: "AuthenticationError", code: http.StatusUnauthorized,
		message: "Unauthorized: missing or wrong API key in the Authorization header", tgiType: "authentication"}
}

func (s *Server) authorized(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if e := s.checkAuth(c); e != nil {
			writeAPIError(c.Writer, pathAPI(c.Request.URL.Path), e)
			return
		}
		h(c)
	}
}

func (s *Server) ready(now time.Time) bool { return !now.Before(s.readyAt) }

func (s *Server) health(c *gin.Context) {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining || !s.ready(time.Now()) {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	c.Status(http.StatusOK)
}

func (s *Server) models(c *gin.Context) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	writeJSON(c.Writer, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: s.model, Object: "model", Created: s.created(), OwnedBy: "testbed", Root: s.model,
		MaxModelLen: s.profile.MaxModelLen}}})
}

// info is TGI's /info.
func (s *Server) info(c *gin.Context) {
	maxConc := s.cfg.limits.MaxConcurrency
	if maxConc == 0 {
		maxConc = 128 // TGI's default max_concurrent_requests
	}
	var maxBatch *int
	if s.profile.MaxNumSeqs > 0 {
		maxBatch = &s.profile.MaxNumSeqs
	}
	writeJSON(c.Writer, http.StatusOK, map[string]any{
		"model_id":                s.model,
		"model_sha":               nil,
		"model_dtype":             "torch.bfloat16",
		"model_device_type":       "cuda",
		"model_pipeline_tag":      "text-generation",
		"max_concurrent_requests": maxConc,
		"max_best_of":             1,
		"max_stop_sequences":      4,
		"max_input_tokens":        max(s.profile.MaxModelLen-1, 0),
		"max_total_tokens":        s.profile.MaxModelLen,
		"validation_workers":      2,
		"max_client_batch_size":   1,
		"max_batch_size":          maxBatch,
		"router":                  "text-generation-router",
		"version":                 "testbed-mock",
		"sha":                     nil,
		"docker_label":            nil,
	})
}

func (s *Server) getTruth(c *gin.Context) {
	t, ok := s.truth.get(c.Param("id"))
	if !ok {
		msg := fmt.Sprintf("no ground truth for request %q (unknown, unfinished or evicted)", c.Param("id"))
		writeAPIError(c.Writer, apiChat, notFound(msg))
		return
	}
	writeJSON(c.Writer, http.StatusOK, t)
}

// listTruth streams every stored truth as JSON lines, oldest first; the
// eviction count is in the X-Testbed-Evicted header.
func (s *Server) listTruth(c *gin.Context) {
	all, evicted := s.truth.all()
	h := c.Writer.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("X-Testbed-Evicted", strconv.FormatUint(evicted, 10))
	c.Status(http.StatusOK)
	bw := bufio.NewWriterSize(c.Writer, 64<<10)
	enc := json.NewEncoder(bw)
	for i := range all {
		if err := enc.Encode(&all[i]); err != nil {
			return // client went away
		}
	}
	bw.Flush()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeAPIError(w, apiChat, &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
			code: http.StatusInternalServerError, message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// readBody reads at most the body limit, answering 413 beyond it.
func (s *Server) readBody(c *gin.Context) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: "RequestEntityTooLargeError",
				code:    http.StatusRequestEntityTooLarge,
				message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), tgiType: "validation"}
		}
		return nil, badRequest("", fmt.Sprintf("reading request body: %v", err))
	}
	return body, nil
}
