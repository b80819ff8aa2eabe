package harness

import (
	"net/url"
	"strings"
	"testing"
)

func TestRedacted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header, url string
		secret            bool // the header's value must be hidden
	}{
		// The standard credential headers, any case.
		{"authorization", "authorization", "http://h/v1", true},
		{"proxy", "Proxy-Authorization", "http://h/v1", true},
		{"api-key", "api-key", "http://h/v1", true},
		{"x-api-key", "X-API-Key", "http://h/v1", true},
		// Names that say what they carry.
		{"token", "X-Session-Token", "http://h/v1", true},
		{"secret", "X-Client-Secret", "http://h/v1", true},
		// A plain header stays as it is.
		{"plain", "X-Team", "http://h/v1", false},
		// A URL's password and credential query parameters are hidden too.
		{"url password", "X-Team", "http://user:pw-secret@h/v1", false},
		{"url query", "X-Team", "http://h/v1?api-key=pw-secret&x=1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Plan{Targets: []Target{{Name: "t", URL: tc.url, Headers: map[string]string{tc.header: "pw-secret"}}}}
			r := p.Redacted()
			if got := r.Targets[0].Headers[tc.header]; (got == Redacted) != tc.secret {
				t.Errorf("header %s: %q", tc.header, got)
			}
			if strings.Contains(r.Targets[0].URL, "pw-secret") {
				t.Errorf("url %s", r.Targets[0].URL)
			}
			if p.Targets[0].Headers[tc.header] != "pw-secret" || p.Targets[0].URL != tc.url {
				t.Error("Redacted changed the plan it was called on")
			}
		})
	}
}

// FuzzRedactURL: whatever the URL, a password never survives redaction,
// and a URL that parsed still parses.
func FuzzRedactURL(f *testing.F) {
	f.Add("http://user:pw@h:8000/v1?api-key=k&x=1")
	f.Add("https://h/v1")
	f.Add("::not a url")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		out := redactURL(s)
		r, err := url.Parse(out)
		if err != nil {
			t.Fatalf("redactURL(%q) = %q does not parse: %v", s, out, err)
		}
		if pw, has := u.User.Password(); has && pw != Redacted {
			if rp, _ := r.User.Password(); rp == pw {
				t.Fatalf("redactURL(%q) = %q keeps the password", s, out)
			}
		}
	})
}
