package mockllm

import (
	"net/http"
	"strconv"
)

// apiError is a request rejected before any token: it carries everything
// needed to write both the OpenAI and the TGI shape.
type apiError struct {
	status  int
	typ     string // OpenAI "type"
	code    any    // OpenAI "code": the status, or a string like "rate_limit_exceeded"
	param   *string
	message string
	tgiType string // TGI "error_type"
	header  http.Header
	fault   string // injected fault that caused it, for Truth
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string) *apiError {
	e := &apiError{status: http.StatusBadRequest, typ: "BadRequestError", code: http.StatusBadRequest,
		message: format, tgiType: "validation"}
	if param != "" {
		e.param = &param
	}
	return e
}

func notFound(msg string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "NotFoundError", code: http.StatusNotFound, message: msg,
		tgiType: "not_found"}
}

func unavailable(msg string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError",
		code: http.StatusServiceUnavailable, message: msg, tgiType: "unavailable"}
}

// overloaded is TGI's answer when max_concurrent_requests is reached; the
// OpenAI endpoints give the same body, as a TGI server does for them.
func overloaded() *apiError {
	return &apiError{status: http.StatusTooManyRequests, typ: "overloaded", code: http.StatusTooManyRequests,
		message: "Model is overloaded", tgiType: "overloaded"}
}

// writeAPIError writes e in the shape of api ("tgi" or an OpenAI one).
func writeAPIError(w http.ResponseWriter, api string, e *apiError) {
	h := w.Header()
	for k, v := range e.header {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	var body []byte
	if api == apiTGI || e.typ == "overloaded" {
		body = tgiErrorJSON(e)
	} else {
		body = openAIErrorJSON(e)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(statusFor(api, e))
	w.Write(body)
}
