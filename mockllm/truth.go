package mockllm

import (
	"sync"
	"time"
)

// Truth is the server's own record of one request: what it received, what
// it sent and when, on the server's monotonic clock (ns since New). A
// client's measurements can be checked against it: a client's TTFT must be
// at least FirstTokenNS-ArrivalNS.
//
// Truth is stored before the stream's terminating bytes are written, so a
// client that has read a whole response can fetch its truth at once.
type Truth struct {
	ID               string  `json:"id"`
	API              string  `json:"api"` // "chat" | "completions" | "tgi"
	Stream           bool    `json:"stream"`
	Status           int     `json:"status"`
	Fault            string  `json:"fault,omitempty"`
	FinishReason     string  `json:"finish_reason,omitempty"` // "stop" | "length" | "abort" (client left or shutdown)
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"` // tokens actually written
	ArrivalNS        int64   `json:"arrival_ns"`        // request received
	DequeuedNS       int64   `json:"dequeued_ns"`       // left the waiting queue
	FirstTokenNS     int64   `json:"first_token_ns"`    // write start of the first token-carrying chunk
	LastTokenNS      int64   `json:"last_token_ns"`
	TokenNS          []int64 `json:"token_ns"` // write time of every token-carrying chunk (one for a non-streamed body)
}

// truthClock is the time base of Truth: nanoseconds since the server's
// New, on the monotonic clock, so wall-clock steps never bend a record.
type truthClock struct{ start time.Time }

func (c truthClock) ns(t time.Time) int64 { return int64(t.Sub(c.start)) }

// truthStore keeps the latest cap truths in a ring, evicting the oldest.
type truthStore struct {
	mu      sync.Mutex
	ring    []Truth
	next    int // slot of the next insert
	full    bool
	byID    map[string]int // id -> slot of its latest truth
	evicted uint64
}

func newTruthStore(capacity int) *truthStore {
	return &truthStore{ring: make([]Truth, capacity), byID: make(map[string]int, min(capacity, 1<<16))}
}

func (s *truthStore) put(t Truth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := s.next
	if s.full {
		old := s.ring[slot].ID
		if cur, ok := s.byID[old]; ok && cur == slot {
			delete(s.byID, old)
		}
		s.evicted++
	}
	s.ring[slot] = t
	s.byID[t.ID] = slot
	s.next++
	if s.next == len(s.ring) {
		s.next, s.full = 0, true
	}
}

func (s *truthStore) get(id string) (Truth, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := s.byID[id]
	if !ok {
		return Truth{}, false
	}
	return s.ring[slot], true
}

// all returns the stored truths oldest first, and the eviction count.
func (s *truthStore) all() ([]Truth, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Truth
	if s.full {
		out = append(out, s.ring[s.next:]...)
	}
	out = append(out, s.ring[:s.next]...)
	return out, s.evicted
}

func (s *truthStore) evictions() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evicted
}
