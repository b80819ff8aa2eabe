package mockllm

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// bucket is a token bucket metered per minute, OpenAI style: capacity is
// the per-minute limit and it refills continuously at limit/60 per second.
type bucket struct {
	limit float64
	level float64
	last  time.Time
}

func newBucket(limit int, now time.Time) *bucket {
	if limit <= 0 {
		return nil
	}
	return &bucket{limit: float64(limit), level: float64(limit), last: now}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.level = math.Min(b.limit, b.level+b.limit*dt.Seconds()/60)
		b.last = now
	}
}

// wait is how long until cost fits, given the current level.
func (b *bucket) wait(cost float64) time.Duration {
	if b.level >= cost {
		return 0
	}
	return time.Duration(math.Ceil((cost - b.level) * 60 / b.limit * 1e9))
}

// reset is how long until the bucket is full again.
func (b *bucket) reset() time.Duration {
	return time.Duration(math.Ceil((b.limit - b.level) * 60 / b.limit * 1e9))
}

// limiter meters requests and tokens together: a request passes only when
// both buckets have room, and then pays both.
type limiter struct {
	mu     sync.Mutex
	req    *bucket
	tok    *bucket
	rpm    int
	tpm    int
	active bool
}

func newLimiter(l LimitConfig, now time.Time) *limiter {
	return &limiter{req: newBucket(l.RPM, now), tok: newBucket(l.TPM, now), rpm: l.RPM, tpm: l.TPM,
		active: l.RPM > 0 || l.TPM > 0}
}

// admit charges one request of cost tokens. It sets the x-ratelimit-*
// headers on h either way and returns a 429 when a bucket is short.
func (l *limiter) admit(now time.Time, cost int, h http.Header) *apiError {
	if !l.active {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var kind string
	var wait time.Duration
	if l.req != nil {
		l.req.refill(now)
		if w := l.req.wait(1); w > 0 {
			kind, wait = "requests", w
		}
	}
	if l.tok != nil {
		l.tok.refill(now)
		if float64(cost) > l.tok.limit {
			l.headers(h)
			msg := fmt.Sprintf("Request too large for %s on tokens per min (TPM): Limit %d, Requested %d. "+
				"The input or output tokens must be reduced in order to run successfully.", orgName, l.tpm, cost)
			return rateLimited("tokens", msg, 0)
		}
		if w := l.tok.wait(float64(cost)); w > wait {
			kind, wait = "tokens", w
		}
	}
	if wait > 0 {
		l.headers(h)
		var msg string
		if kind == "requests" {
			msg = fmt.Sprintf("Rate limit reached for %s on requests per min (RPM): Limit %d, Used %d, Requested 1. "+
				"Please try again in %s.", orgName, l.rpm, l.rpm-int(l.req.level), formatReset(wait))
		} else {
			msg = fmt.Sprintf("Rate limit reached for %s on tokens per min (TPM): Limit %d, Used %d, Requested %d. "+
				"Please try again in %s.", orgName, l.tpm, l.tpm-int(l.tok.level), cost, formatReset(wait))
		}
		e := rateLimited(kind, msg, wait)
		for k, v := range h {
			e.header[k] = v
		}
		return e
	}
	if l.req != nil {
		l.req.level--
	}
	if l.tok != nil {
		l.tok.level -= float64(cost)
	}
	l.headers(h)
	return nil
}

const orgName = "organization org-testbed"

// headers writes OpenAI's x-ratelimit-* headers from the current levels.
func (l *limiter) headers(h http.Header) {
	if l.req != nil {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(l.rpm))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(math.Max(0, l.req.level))))
		h.Set("x-ratelimit-reset-requests", formatReset(l.req.reset()))
	}
	if l.tok != nil {
		h.Set("x-ratelimit-limit-tokens", strconv.Itoa(l.tpm))
		h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(math.Max(0, l.tok.level))))
		h.Set("x-ratelimit-reset-tokens", formatReset(l.tok.reset()))
	}
}

// rateLimited is OpenAI's 429 with retry-after (whole seconds, rounded up)
// and retry-after-ms; wait 0 means retrying cannot help (request too large).
func rateLimited(kind, msg string, wait time.Duration) *apiError {
	e := &apiError{status: http.StatusTooManyRequests, typ: kind, code: "rate_limit_exceeded", message: msg,
		tgiType: "rate_limit", header: http.Header{}}
	if wait > 0 {
		e.header.Set("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		e.header.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/1e6)), 10))
	}
	return e
}

// formatReset renders a duration the way OpenAI's reset headers do: "12ms"
// below a second, else Go's duration format at millisecond precision
// ("6.6s", "1m0s").
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	return d.String()
}
