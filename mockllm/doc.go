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
// Requests are tokenized by package tokens (one token per whitespace-
// separated word, chat template overhead tokens.ChatTemplateOverhead), so a
// client can build prompts of exact lengths. The generated text, the answer
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
package mockllm
