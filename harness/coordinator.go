package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Coordinator is the tiny HTTP service that lets the shards of a
// scaled-out run act as one (`testbed coordinate`). It hands out shard
// indices (for replicas that cannot be told theirs, like compose's
// --scale), tells the time so each shard can measure its clock offset,
// and holds a barrier per step: when every shard has arrived, all are
// given one start time, Lead in the future on the coordinator's clock.
// A wall-clock start alone cannot do this: steps bounded by a request
// count end when they end, so only a barrier can start the next step
// together; and agreeing on the coordinator's clock, not on the moment a
// reply arrives, keeps the start skew at the clock estimate's error
// (± half a round trip) instead of the reply's delivery jitter.
type Coordinator struct {
	count int
	lead  time.Duration
	group string
	mu    sync.Mutex
	// claimed marks the indices taken; arrived counts shards per step;
	// release closes when a step's barrier opens, start is that step's time.
	claimed []bool
	steps   map[int]*barrier
	done    map[int]bool
	allDone chan struct{}
}

type barrier struct {
	arrived map[int]bool
	release chan struct{}
	start   time.Time
}

// NewCoordinator coordinates count shards; lead is how far ahead of the
// last arrival a step starts (default 200ms), time enough for the reply to
// reach every shard.
func NewCoordinator(count int, lead time.Duration) (*Coordinator, error) {
	if count < 1 {
		return nil, fmt.Errorf("coordinator: %d shards: want at least 1", count)
	}
	if lead <= 0 {
		lead = 200 * time.Millisecond
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Coordinator{
		count:   count,
		lead:    lead,
		group:   hex.EncodeToString(b[:]),
		claimed: make([]bool, count),
		steps:   map[int]*barrier{},
		done:    map[int]bool{},
		allDone: make(chan struct{}),
	}, nil
}

// Done closes when every shard has reported its run finished.
func (c *Coordinator) Done() <-chan struct{} { return c.allDone }

// Group is the id every shard records as its group.
func (c *Coordinator) Group() string { return c.group }

// joinMsg is /v1/join's body and reply; shardMsg is /v1/barrier's and /v1/done's.
type joinMsg struct {
	Shard int    `json:"shard"` // -1 asks for one
	Count int    `json:"count"`
	Group string `json:"group,omitempty"`
}

type shardMsg struct {
	Shard int `json:"shard"`
	Step  int `json:"step"`
}

type timeMsg struct {
	NowNS   int64 `json:"now_ns"`   // /v1/time: the coordinator's clock, Unix ns
	StartNS int64 `json:"start_ns"` // /v1/barrier: the agreed start, Unix ns
}

// ServeHTTP serves /v1/time, /v1/join, /v1/barrier, /v1/done and /health.
func (c *Coordinator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusOK)
	case "/v1/time":
		writeJSON(w, timeMsg{NowNS: time.Now().UnixNano()})
	case "/v1/join":
		c.join(w, r)
	case "/v1/barrier":
		c.barrier(w, r)
	case "/v1/done":
		c.finish(w, r)
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// readMsg decodes a POSTed JSON body strictly, answering 400 when it is not.
func readMsg(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (c *Coordinator) join(w http.ResponseWriter, r *http.Request) {
	var m joinMsg
	if !readMsg(w, r, &m) {
		return
	}
	if m.Count != c.count {
		http.Error(w, fmt.Sprintf("this coordinator runs %d shards, not %d", c.count, m.Count), http.StatusConflict)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.Shard < 0 {
		m.Shard = c.freeIndex()
		if m.Shard < 0 {
			http.Error(w, fmt.Sprintf("all %d shard indices are taken", c.count), http.StatusConflict)
			return
		}
	}
	if m.Shard >= c.count || c.claimed[m.Shard] {
		http.Error(w, fmt.Sprintf("shard %d is out of range or already joined", m.Shard), http.StatusConflict)
		return
	}
	c.claimed[m.Shard] = true
	m.Group = c.group
	writeJSON(w, m)
}

func (c *Coordinator) freeIndex() int {
	for i, taken := range c.claimed {
		if !taken {
			return i
		}
	}
	return -1
}

// barrier holds the request until every shard reached the step, then
// answers the step's start.
func (c *Coordinator) barrier(w http.ResponseWriter, r *http.Request) {
	var m shardMsg
	if !readMsg(w, r, &m) {
		return
	}
	if m.Shard < 0 || m.Shard >= c.count {
		http.Error(w, fmt.Sprintf("shard %d is out of range 0..%d", m.Shard, c.count-1), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	b := c.steps[m.Step]
	if b == nil {
		b = &barrier{arrived: map[int]bool{}, release: make(chan struct{})}
		c.steps[m.Step] = b
	}
	b.arrived[m.Shard] = true
	if len(b.arrived) == c.count && b.start.IsZero() {
		b.start = time.Now().Add(c.lead)
		close(b.release)
	}
	c.mu.Unlock()
	select {
	case <-b.release:
		writeJSON(w, timeMsg{NowNS: time.Now().UnixNano(), StartNS: b.start.UnixNano()})
	case <-r.Context().Done():
	}
}

func (c *Coordinator) finish(w http.ResponseWriter, r *http.Request) {
	var m shardMsg
	if !readMsg(w, r, &m) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[m.Shard] = true
	if len(c.done) == c.count {
		select {
		case <-c.allDone:
		default:
			close(c.allDone)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// coordClient is a shard's side of the coordinator.
type coordClient struct {
	base    string
	hc      *http.Client
	info    results.ShardInfo
	timeout time.Duration
	broken  string // why the coordinator is no longer used, once a barrier failed
}

// joinCoordinator registers the shard (getting its index when auto),
// then measures the clock offset.
func joinCoordinator(ctx context.Context, s *Shard) (*coordClient, error) {
	c := &coordClient{
		base:    strings.TrimRight(s.Coordinator, "/"),
		hc:      &http.Client{},
		timeout: s.BarrierTimeout.D(),
		info:    results.ShardInfo{Index: s.Index, Count: s.Count, Coordinator: s.Coordinator},
	}
	if c.timeout <= 0 {
		c.timeout = 2 * time.Minute
	}
	ask := joinMsg{Shard: s.Index, Count: s.Count}
	if s.Auto {
		ask.Shard = -1
	}
	var got joinMsg
	jctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.post(jctx, "/v1/join", ask, &got); err != nil {
		return nil, fmt.Errorf("shard: coordinator %s: join: %w", s.Coordinator, err)
	}
	c.info.Index = got.Shard
	c.info.Group = got.Group
	s.Index = got.Shard
	s.Auto = false
	if err := c.measureClock(jctx); err != nil {
		return nil, fmt.Errorf("shard: coordinator %s: clock: %w", s.Coordinator, err)
	}
	return c, nil
}

// measureClock keeps the offset of the round trip with the least delay,
// whose error is at most half that round trip (NTP's rule).
func (c *coordClient) measureClock(ctx context.Context) error {
	best := time.Duration(-1)
	for range 8 {
		sent := time.Now()
		var m timeMsg
		if err := c.get(ctx, "/v1/time", &m); err != nil {
			return err
		}
		got := time.Now()
		rtt := got.Sub(sent)
		if best >= 0 && rtt >= best {
			continue
		}
		best = rtt
		mid := sent.Add(rtt / 2)
		c.info.ClockOffsetNS = m.NowNS - mid.UnixNano()
		c.info.ClockRTTNS = int64(rtt)
	}
	return nil
}

// waitStep blocks at the step's barrier, then until the agreed start, and
// records when the shard actually started on the coordinator's clock. A
// barrier that fails leaves the step, and the rest, unsynchronised.
func (c *coordClient) waitStep(ctx context.Context, step int) {
	ss := results.ShardStep{Step: step}
	if c.broken == "" {
		var m timeMsg
		bctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := c.post(bctx, "/v1/barrier", shardMsg{Shard: c.info.Index, Step: step}, &m)
		cancel()
		if err != nil {
			c.broken = fmt.Sprintf("barrier of step %d: %v", step, err)
		} else {
			ss.Agreed = time.Unix(0, m.StartNS).UTC()
			local := ss.Agreed.Add(-time.Duration(c.info.ClockOffsetNS))
			sleepCtx(ctx, time.Until(local))
		}
	}
	ss.Unsynced = c.broken
	ss.Start = time.Now().Add(time.Duration(c.info.ClockOffsetNS)).UTC()
	if !ss.Agreed.IsZero() {
		ss.LateNS = int64(ss.Start.Sub(ss.Agreed))
	}
	c.info.Steps = append(c.info.Steps, ss)
}

// done tells the coordinator this shard has finished.
func (c *coordClient) done(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return c.post(dctx, "/v1/done", shardMsg{Shard: c.info.Index}, nil)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c *coordClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

func (c *coordClient) post(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, out)
}

func (c *coordClient) do(req *http.Request, out any) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", req.URL.Path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: %w", req.URL.Path, err)
	}
	return nil
}
