package mockllm

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// generate handles the model endpoints. For TGI the route decides
// streaming; for OpenAI the body's "stream" field does.
func (s *Server) generate(api string, tgiStream bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		arrival := time.Now()
		id := rid(c)
		j, plan, e := s.prepare(c, api, tgiStream, arrival, id)
		if e != nil {
			if e.fault != "" {
				s.metrics.faults.WithLabelValues(e.fault).Inc()
			}
			s.metrics.rejected.WithLabelValues(rejectReason(e)).Inc()
			s.truth.put(Truth{ID: id, API: api, Stream: j.stream, Status: statusFor(api, e), Fault: e.fault,
				PromptTokens: j.promptTokens, ArrivalNS: s.Since(arrival)})
			writeAPIError(c.Writer, api, e)
			return
		}
		defer s.release()
		defer s.inflight.Add(-1)
		if plan.kind != "" {
			s.metrics.faults.WithLabelValues(plan.kind).Inc()
		}
		s.run(c, &j, plan, arrival, id)
	}
}

// statusFor is the status of e on api: TGI answers validation errors with
// 422 where vLLM uses 400.
func statusFor(api string, e *apiError) int {
	if api == apiTGI && e.status == http.StatusBadRequest {
		return http.StatusUnprocessableEntity
	}
	return e.status
}

func rejectReason(e *apiError) string {
	switch {
	case e.fault != "":
		return "fault"
	case e.typ == "overloaded":
		return "overloaded"
	case e.status == http.StatusTooManyRequests:
		return "rate_limit"
	case e.status == http.StatusServiceUnavailable:
		return "unavailable"
	case e.status == http.StatusUnauthorized:
		return "unauthorized"
	}
	return "invalid"
}

// prepare runs every check before generation, in the order a real server
// meets them: startup, auth, body, validation, concurrency, rate limits,
// then draining. An injected 429 comes just before the real limiter and an
// injected 500 just after it. On success the request holds an inflight
// slot and an active count (the caller releases both).
func (s *Server) prepare(
	c *gin.Context, api string, tgiStream bool, arrival time.Time, id string,
) (job, faultPlan, *apiError) {
	var j job
	if !s.ready(arrival) {
		return j, faultPlan{}, unavailable("server is starting up")
	}
	if e := s.checkAuth(c); e != nil {
		return j, faultPlan{}, e
	}
	body, e := s.readBody(c)
	if e != nil {
		return j, faultPlan{}, e
	}
	j, e = decodeRequest(api, body, s.lim)
	if api == apiTGI {
		j.stream = tgiStream
	}
	if e != nil {
		return j, faultPlan{}, e
	}
	plan, e := s.planFaults(faultKey(id, c.GetHeader(AttemptHeader)), c.GetHeader("X-Testbed-Fault"), j.outTokens)
	if e != nil {
		return j, plan, e
	}
	n := s.inflight.Add(1)
	if lim := s.cfg.limits.MaxConcurrency; lim > 0 && n > int64(lim) {
		s.inflight.Add(-1)
		return j, plan, overloaded()
	}
	if e := plan.rateLimitError(); e != nil {
		s.inflight.Add(-1)
		return j, plan, e
	}
	if e := s.limiter.admit(arrival, j.promptTokens+j.maxTokens, c.Writer.Header()); e != nil {
		s.inflight.Add(-1)
		return j, plan, e
	}
	if e := plan.serverError(); e != nil {
		s.inflight.Add(-1)
		return j, plan, e
	}
	if !s.admit() {
		s.inflight.Add(-1)
		return j, plan, unavailable("server is shutting down")
	}
	return j, plan, nil
}

// emitDeps is what the emitter of request id needs of the server.
func (s *Server) emitDeps(j *job, plan faultPlan, id string) emitDeps {
	return emitDeps{
		enc:      newEncoder(j, id, s.created),
		plan:     plan,
		pace:     newPacer(s.waker, &s.streams, s.metrics.lateness),
		metrics:  s.metrics,
		truth:    s.truth,
		clock:    s.clock,
		shutdown: s.abortCtx,
		leave:    s.watch.leave,
	}
}

// run starts the request on the scheduler and writes the response.
func (s *Server) run(c *gin.Context, j *job, plan faultPlan, arrival time.Time, id string) {
	// Streams end when the client leaves or when Drain gives up waiting;
	// AfterFunc ties the two without a goroutine per request.
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	defer context.AfterFunc(s.abortCtx, cancel)()
	tr := Truth{ID: id, API: j.api, Stream: j.stream, Status: http.StatusOK, Fault: plan.kind,
		PromptTokens: j.promptTokens, ArrivalNS: s.Since(arrival)}
	s.watch.arrive(j.promptTokens)
	st, err := s.sched.Start(ctx, engine.Request{ID: id, PromptTokens: j.promptTokens, OutputTokens: j.outTokens,
		Waited: time.Since(arrival)})
	if err != nil {
		var e *apiError
		switch {
		case errors.Is(err, engine.ErrQueueFull):
			e = unavailable("waiting queue is full")
		case errors.Is(err, engine.ErrClosed):
			e = unavailable("server is shutting down")
		case ctx.Err() != nil:
			return // client left before admission; nothing to answer
		default:
			e = badRequest("", err.Error())
		}
		s.watch.leave()
		s.metrics.rejected.WithLabelValues(rejectReason(e)).Inc()
		tr.Status = statusFor(j.api, e)
		s.truth.put(tr)
		writeAPIError(c.Writer, j.api, e)
		return
	}
	defer st.Close()
	s.metrics.promptTokens.Add(float64(j.promptTokens))
	s.streams.Add(1)
	defer s.streams.Add(-1)
	em := newEmitter(s.emitDeps(j, plan, id), c.Writer, j, st, &tr, arrival)
	defer em.stop()
	defer em.done() // when no last write came
	if j.stream {
		em.stream(ctx)
	} else {
		em.whole(ctx)
	}
}
