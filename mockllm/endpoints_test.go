package mockllm

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestEndpointAccess checks, with an API key set, which endpoints stay
// open (vLLM keeps /health and /metrics open for monitoring), that TGI's
// routes answer errors in TGI's shape, and that a trailing slash serves
// the route rather than redirecting.
func TestEndpointAccess(t *testing.T) {
	t.Parallel()
	_, ts := fastServer(t, WithAPIKey("k"))
	auth := []string{"Authorization", "Bearer k"}
	chat := `{"messages":[{"role":"user","content":"a"}],"max_tokens":2}`
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		shape                    string // "openai", "tgi" or "" (not an error)
	}{
		// Monitoring needs no key.
		{"metrics open", http.MethodGet, "/metrics", "", nil, 200, ""},
		{"health open", http.MethodGet, "/health", "", nil, 200, ""},
		// Everything else does.
		{"models keyed", http.MethodGet, "/v1/models", "", nil, 401, "openai"},
		{"info keyed", http.MethodGet, "/info", "", nil, 401, "tgi"},
		{"truth keyed", http.MethodGet, "/testbed/requests", "", nil, 401, "openai"},
		{"truth by id keyed", http.MethodGet, "/testbed/requests/x", "", nil, 401, "openai"},
		{"generate keyed", http.MethodPost, "/generate", `{"inputs":"a"}`, nil, 401, "tgi"},
		{"info with key", http.MethodGet, "/info", "", auth, 200, ""},
		{"truth with key", http.MethodGet, "/testbed/requests", "", auth, 200, ""},
		// A key that shares a prefix with the right one is still wrong.
		{"prefix of the key", http.MethodGet, "/v1/models", "", []string{"Authorization", "Bearer"}, 401, "openai"},
		{"longer key", http.MethodGet, "/v1/models", "", []string{"Authorization", "Bearer kk"}, 401, "openai"},
		// TGI's routes answer 404 and 405 in TGI's shape.
		{"tgi wrong method", http.MethodGet, "/generate", "", auth, 405, "tgi"},
		{"tgi unknown path", http.MethodPost, "/generate_streamx", "{}", auth, 404, "tgi"},
		{"openai wrong method", http.MethodGet, "/v1/chat/completions", "", auth, 405, "openai"},
		// A trailing slash serves the route.
		{"trailing slash", http.MethodPost, "/v1/chat/completions/", chat, auth, 200, ""},
		{"trailing slash tgi", http.MethodPost, "/generate/", `{"inputs":"a","parameters":{"max_new_tokens":2}}`,
			auth, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, ts, tc.method, tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			var m map[string]json.RawMessage
			switch tc.shape {
			case "openai":
				var e openAIErrorBody
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
					t.Errorf("not an OpenAI error body: %s", body)
				}
			case "tgi":
				if err := json.Unmarshal(body, &m); err != nil || m["error"] == nil || m["error_type"] == nil ||
					strings.HasPrefix(string(m["error"]), "{") {
					t.Errorf("not a TGI error body: %s", body)
				}
			}
		})
	}
}
