// Package mockllm is the calibrated mock LLM server: an http.Handler that
// speaks the OpenAI API as vLLM serves it (POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models) and TGI's (POST /generate,
// POST /generate_stream, GET /info), with GET /health and GET /metrics
// (vLLM's metric names). Its costs come from an engine.Scheduler, so every
// token's emission time is known exactly; the server sleeps until each
// token's absolute due time, writes and flushes it, and records what it did:
//
//   - GET /testbed/requests/{id} and GET /testbed/requests (JSON lines) serve
//     each request's ground truth (Truth): arrival, leaving the queue, and the
//     write time of every token chunk, so a client's measurements can be
//     checked against the server's own.
//   - testbed_mock_emission_lateness_seconds measures how late the writes
//     are against the schedule, the mock's own error.
//
// Requests are tokenized by package tokens (one token per
// whitespace-separated word, chat template overhead
// tokens.ChatTemplateOverhead), so a client can build prompts of exact
// lengths. The generated text, the answer
// length (where the modelled model emits EOS: see WithAnswerLength) and
// every injected fault are deterministic for a seed.
//
// Throttling (LimitConfig) and faults (FaultConfig) reproduce what a client
// meets in production: OpenAI's 429 with x-ratelimit-* and retry-after
// headers, TGI's overloaded 429, 5xx before the first byte, cut streams,
// stalls, multi-token events, fixed-interval pacing, and a first byte long
// before the first token. A request header X-Testbed-Fault forces one fault.
//
// Every response carries x-request-id: the client's own when it sent one,
// which is also the key of its Truth.
//
// With an API key (WithAPIKey), /health and /metrics stay open, as on
// vLLM, and every other route needs the key, compared in constant time.
// A trailing slash is ignored rather than redirected. Errors on TGI's
// routes take TGI's shape, on the others OpenAI's, and never name a Go
// type.
//
// # Layout
//
// A model request passes through the files in this order:
//
//   - generate.go: the handler. prepare makes the checks a real server
//     makes before generation, in its order (startup, auth, body,
//     validation, concurrency, rate limits, then draining), with the
//     injected 429 and 500 among them; run starts the request on the
//     scheduler and hands it to an emitter with only what the emitter needs
//     (emitDeps).
//   - request.go: each API's body decoded and validated into a job: prompt
//     tokens, output length (the EOS model), the text's seed.
//   - throttle.go: LimitConfig's token buckets and OpenAI's 429 headers.
//   - faults.go: FaultConfig, the fault plan drawn per request, and every
//     place a fault is applied: the injected 429 and 500 before
//     generation; stalls, stream cuts, tokens per event, the pacing tick
//     and the early first byte while writing.
//   - encode.go, encode_chat.go, encode_completions.go, encode_tgi.go: one
//     encoder per API, which alone knows the bytes of its chunks, bodies
//     and error events.
//   - pace.go: the pacer, which waits for each due time on the precise
//     waker or a runtime timer and measures the writes' lateness.
//   - emit.go: the emitter, the loop of one response: it takes tokens from
//     the scheduler, lets the fault plan group and delay them, waits on its
//     pacer, writes the encoder's bytes and records each write.
//
// Beside them: server.go (New, routes, Drain and Close, the endpoints that
// generate nothing), options.go (New's options), truth.go (Truth and its
// store), metrics.go (the Prometheus metrics) and errors.go (apiError, a
// request refused before its first token).
package mockllm
