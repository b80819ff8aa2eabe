package netem

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"time"
)

// DialContext connects to the proxy the way a client across the emulated
// link connects to the server: connect() returns one round trip
// (Config.RTT) after it began, the time SYN and SYN-ACK take to cross,
// when Config.Handshake is set. addr is the server the caller meant to
// reach; it is only reported. The wait is reported to an
// httptrace.ClientTrace in ctx as part of the connect (ConnectStart and
// ConnectDone), so an HTTP client's connect time includes it, as it would
// on a real link; the proxy's own loopback connect is not traced apart.
// It has net.Dialer.DialContext's signature, for http.Transport.
func (p *Proxy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	own := p.Addr()
	if own == "" {
		return nil, errors.New("netem: dial: the proxy is not listening")
	}
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.ConnectStart != nil {
		trace.ConnectStart(network, addr)
	}
	var d net.Dialer
	c, err := d.DialContext(untraced{ctx}, "tcp", own)
	if err == nil && p.cfg.Handshake {
		err = sleepCtx(ctx, p.cfg.RTT())
		if err != nil {
			c.Close()
			c = nil
		}
	}
	if err != nil {
		err = fmt.Errorf("netem: dial %s through %s: %w", addr, own, err)
	}
	if trace != nil && trace.ConnectDone != nil {
		trace.ConnectDone(network, addr, err)
	}
	return c, err
}

// untraced is ctx without its values, so the loopback dial to the proxy
// does not report a second connect to the caller's trace.
type untraced struct{ context.Context }

// Value hides every value of the wrapped context.
func (untraced) Value(any) any { return nil }

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
