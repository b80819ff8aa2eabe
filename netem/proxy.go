package netem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts a proxy's traffic and faults.
type Stats struct {
	Accepted   int64 `json:"accepted"`    // client connections accepted
	Active     int64 `json:"active"`      // connections open now
	DialErrors int64 `json:"dial_errors"` // client connections closed because the upstream refused
	BytesUp    int64 `json:"bytes_up"`    // delivered client → upstream
	BytesDown  int64 `json:"bytes_down"`  // delivered upstream → client
	Resets     int64 `json:"resets"`      // connections reset by a fault
	Stalls     int64 `json:"stalls"`      // chunks held back by a stall
	// Losses counts TCP segments lost (Direction.Loss) and delivered late;
	// RTOs those of them that waited for the retransmission timeout rather
	// than a fast retransmit.
	Losses int64 `json:"losses"`
	RTOs   int64 `json:"rtos"`
	// Chunks counts chunks delivered; Late1ms those written more than 1 ms
	// after their delivery time, and MaxLateNS the worst such delay. They
	// say how faithfully the configured delays were applied: a busy host
	// wakes the delivering goroutines late.
	Chunks    int64 `json:"chunks"`
	Late1ms   int64 `json:"late_over_1ms"`
	MaxLateNS int64 `json:"max_late_ns"`
}

// Proxy forwards TCP connections to an upstream, shaping both directions.
// Create it with New, then Serve a listener (or Listen); Close stops it.
type Proxy struct {
	upstream string
	cfg      Config
	dialer   net.Dialer

	mu     sync.Mutex
	ln     net.Listener
	pairs  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, active, dialErrs, up, down, resets, stalls atomic.Int64
	losses, rtos                                         atomic.Int64
	chunks, late1ms, maxLate                             atomic.Int64
}

// New returns a proxy to upstream (host:port) applying cfg.
func New(upstream string, cfg Config) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("netem: upstream %q: want host:port: %w", upstream, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	return &Proxy{
		upstream: upstream,
		cfg:      cfg,
		dialer:   net.Dialer{Timeout: cfg.DialTimeout},
		pairs:    map[*pair]struct{}{},
	}, nil
}

// Listen listens on addr (e.g. "127.0.0.1:0") and serves in the background;
// Addr tells the bound address.
func (p *Proxy) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("netem: %w", err)
	}
	if err := p.setListener(ln); err != nil {
		return err
	}
	go p.serve(ln) //nolint:errcheck // ends with net.ErrClosed at Close
	return nil
}

func (p *Proxy) setListener(ln net.Listener) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		ln.Close()
		return net.ErrClosed
	}
	if p.ln != nil {
		ln.Close()
		return errors.New("netem: proxy already serving")
	}
	p.ln = ln
	return nil
}

// Addr is the listener's address, "" before Serve.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// Serve accepts connections on ln until Close; it returns net.ErrClosed then.
func (p *Proxy) Serve(ln net.Listener) error {
	if err := p.setListener(ln); err != nil {
		return err
	}
	return p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return net.ErrClosed
			}
			// Temporary (e.g. out of descriptors): back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		// Add under the lock that Close takes, so Close's Wait never races an Add.
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return net.ErrClosed
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.handle(c, p.accepted.Add(1)-1)
	}
}

// pair is one proxied connection: the client side and the upstream side.
type pair struct {
	client, upstream net.Conn
	once             sync.Once
	done             chan struct{} // closed when the pair is torn down
}

// teardown closes both sides; with reset, the close sends RST (SO_LINGER 0)
// so the peer sees "connection reset", as after a real network fault.
func (pr *pair) teardown(reset bool) {
	pr.once.Do(func() {
		for _, c := range []net.Conn{pr.client, pr.upstream} {
			if tc, ok := c.(*net.TCPConn); ok && reset {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
		close(pr.done)
	})
}

func (p *Proxy) handle(c net.Conn, index int64) {
	defer p.wg.Done()
	accepted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	u, err := p.dialer.DialContext(ctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		p.dialErrs.Add(1)
		c.Close()
		return
	}
	pr := &pair{client: c, upstream: u, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.teardown(false)
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	p.active.Add(1)
	defer func() {
		p.mu.Lock()
		delete(p.pairs, pr)
		p.mu.Unlock()
		p.active.Add(-1)
	}()

	start := time.Now()
	seed := uint64(p.cfg.Seed)*1_000_003 + uint64(index)*2
	up := p.newShaper(p.cfg.Up, seed, start)
	if p.cfg.Handshake {
		// SYN and SYN-ACK cross the link before the client may send.
		up.bucketAt = maxTime(start, accepted.Add(p.cfg.RTT()))
	}
	down := p.newShaper(p.cfg.Down, seed+1, start)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pipe(pr, c, u, up, p.cfg.chunkSize(p.cfg.Up), &p.up)
	}()
	go func() {
		defer wg.Done()
		p.pipe(pr, u, c, down, p.cfg.chunkSize(p.cfg.Down), &p.down)
	}()
	wg.Wait()
	pr.teardown(false)
}

// newShaper is a shaper for one direction of a connection, knowing what a
// lost segment costs on this link.
func (p *Proxy) newShaper(d Direction, seed uint64, start time.Time) *shaper {
	sh := newShaper(d, seed, start)
	sh.rtt = p.cfg.RTT()
	sh.rto = p.cfg.RTO()
	return sh
}

// chunk is bytes read from one side, waiting for their delivery time.
type chunk struct {
	buf   *[]byte
	n     int
	at    time.Time
	reset bool
}

// queueLen bounds the chunks in flight per direction: a full queue stops
// reading, so a slow shaped link pushes back on the sender, as TCP would.
const queueLen = 256

// pipe moves src → dst through the shaper: this goroutine reads and
// stamps chunks, a second one writes each at its time.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn, sh *shaper, size int, bytes *atomic.Int64) {
	pool := sync.Pool{New: func() any { b := make([]byte, size); return &b }}
	q := make(chan chunk, queueLen)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		p.deliver(pr, dst, q, &pool, bytes)
	}()
	defer func() { close(q); <-wdone }()
	for {
		b := pool.Get().(*[]byte)
		n, err := src.Read(*b)
		if n > 0 {
			v := sh.schedule(time.Now(), n)
			if v.stalled {
				p.stalls.Add(1)
			}
			p.losses.Add(int64(v.lost))
			p.rtos.Add(int64(v.rtos))
			select {
			case q <- chunk{buf: b, n: v.pass, at: v.deliver, reset: v.reset}:
			case <-pr.done:
				return
			}
			if v.reset {
				return
			}
		} else {
			pool.Put(b)
		}
		if err != nil {
			return
		}
	}
}

// deliver writes each chunk at its time. At the end of the source it
// half-closes dst, so the peer sees EOF only after the last byte's delay.
func (p *Proxy) deliver(pr *pair, dst net.Conn, q <-chan chunk, pool *sync.Pool, bytes *atomic.Int64) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ch := range q {
		if wait := time.Until(ch.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-pr.done:
				pool.Put(ch.buf)
				return
			}
		}
		p.chunks.Add(1)
		if late := time.Since(ch.at); late > time.Millisecond {
			p.late1ms.Add(1)
			for cur := p.maxLate.Load(); int64(late) > cur && !p.maxLate.CompareAndSwap(cur, int64(late)); cur = p.maxLate.Load() {
			}
		}
		if ch.n > 0 {
			if _, err := dst.Write((*ch.buf)[:ch.n]); err != nil {
				pool.Put(ch.buf)
				pr.teardown(false)
				return
			}
			bytes.Add(int64(ch.n))
		}
		pool.Put(ch.buf)
		if ch.reset {
			p.resets.Add(1)
			pr.teardown(true)
			return
		}
	}
	// Source ended cleanly: pass the EOF on.
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		pr.teardown(false)
	}
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.accepted.Load(), Active: p.active.Load(), DialErrors: p.dialErrs.Load(),
		BytesUp: p.up.Load(), BytesDown: p.down.Load(), Resets: p.resets.Load(), Stalls: p.stalls.Load(),
		Losses: p.losses.Load(), RTOs: p.rtos.Load(),
		Chunks: p.chunks.Load(), Late1ms: p.late1ms.Load(), MaxLateNS: p.maxLate.Load(),
	}
}

// Close stops accepting, closes every proxied connection and waits for
// their goroutines. It is safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.teardown(false)
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

var _ io.Closer = (*Proxy)(nil)
