package harness

import (
	"maps"
	"net/url"
	"strings"
)

// Redacted is the mark that replaces a credential wherever a plan is shown
// or written (run.json, report.md, report.html, the terminal).
const Redacted = "[redacted]"

// SecretHeader reports whether a request header carries a credential:
// Authorization, Proxy-Authorization, Cookie, api-key, x-api-key, and any
// header whose name holds token, secret, key, password or auth.
func SecretHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie", "api-key", "x-api-key":
		return true
	}
	for _, w := range []string{"token", "secret", "key", "password", "passwd", "auth"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Redacted returns a copy of p that is safe to show or write: credential
// header values and the password of a target URL are replaced by
// Redacted. The plan sent to servers is never the redacted one.
func (p Plan) Redacted() Plan {
	p.Targets = redactTargets(p.Targets)
	return p
}

func redactTargets(ts []Target) []Target {
	if ts == nil {
		return nil
	}
	out := make([]Target, len(ts))
	for i, t := range ts {
		t.URL = redactURL(t.URL)
		if t.Headers != nil {
			h := maps.Clone(t.Headers)
			for k := range h {
				if SecretHeader(k) {
					h[k] = Redacted
				}
			}
			t.Headers = h
		}
		out[i] = t
	}
	return out
}

// redactURL hides a URL's password and the values of query parameters
// that look like credentials (?api-key=...).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	changed := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Redacted)
		changed = true
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if SecretHeader(k) {
				q.Set(k, Redacted)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return s
	}
	return u.String()
}
