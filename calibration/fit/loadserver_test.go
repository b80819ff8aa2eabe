package fit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/internal/tokens"
	"github.com/llm-testbed/testbed/internal/wake"
)

// loadServer is an OpenAI-compatible chat server written for the tests,
// unlike the mock's engine in every way that matters to the fit: each
// request sleeps on its own schedule, with no shared step. Its TTFT grows
// with the requests in flight when it arrives and with its prompt, each
// inter-token gap with the requests in flight when the gap begins, and
// both carry lognormal jitter.
type loadServer struct {
	ttftBase, ttftPerReq time.Duration
	ttftPerPromptToken   time.Duration
	itlBase, itlPerReq   time.Duration
	cv                   float64 // jitter of each sleep
	seed                 uint64

	// waker sleeps precisely, as the mock does: the runtime's timers can
	// wake a mostly idle process up to a millisecond late. nil: time.Sleep.
	waker *wake.Waker

	inFlight atomic.Int64
	reqs     atomic.Uint64
	writes   atomic.Int64 // token writes
	late     atomic.Int64 // of them, more than a millisecond after their time
}

// lateShare is the share of token writes more than a millisecond late: a
// busy machine's, not the model's.
func (s *loadServer) lateShare() float64 {
	return float64(s.late.Load()) / math.Max(1, float64(s.writes.Load()))
}

// chatRequest is what the server reads of a chat completion request.
type chatRequest struct {
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
}

func (s *loadServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	arrival := time.Now()
	var req chatRequest
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil ||
		!req.Stream || req.MaxTokens < 1 {
		http.Error(w, `{"error":{"message":"want a streamed chat completion with max_tokens"}}`, http.StatusBadRequest)
		return
	}
	prompt := tokens.ChatOverhead(len(req.Messages))
	for _, m := range req.Messages {
		prompt += tokens.Count(m.Content)
	}
	rng := rand.New(rand.NewPCG(s.seed, s.reqs.Add(1)))
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	ttft := s.ttftBase + time.Duration(n-1)*s.ttftPerReq + time.Duration(prompt)*s.ttftPerPromptToken
	next := arrival.Add(s.jitter(rng, ttft))
	for i := range req.MaxTokens {
		if i > 0 {
			m := s.inFlight.Load()
			next = next.Add(s.jitter(rng, s.itlBase+time.Duration(m-1)*s.itlPerReq))
		}
		s.sleep(r, next)
		s.writes.Add(1)
		if time.Since(next) > time.Millisecond {
			s.late.Add(1)
		}
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"+
			"\"delta\":{\"content\":\" w%d\"},\"finish_reason\":null}]}\n\n", i)
		fl.Flush()
	}
	fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},"+
		"\"finish_reason\":\"length\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],"+
		"\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", prompt, req.MaxTokens)
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// sleep waits until t.
func (s *loadServer) sleep(r *http.Request, t time.Time) {
	if s.waker != nil {
		s.waker.Sleep(r.Context(), t)
		return
	}
	time.Sleep(time.Until(t))
}

// jitter scales d by a lognormal factor of mean 1 and CV s.cv.
func (s *loadServer) jitter(rng *rand.Rand, d time.Duration) time.Duration {
	s2 := math.Log1p(s.cv * s.cv)
	f := math.Exp(-s2/2 + math.Sqrt(s2)*rng.NormFloat64())
	return time.Duration(float64(d) * f)
}

// simulateLoadServer runs a closed-loop ladder against the loadServer's
// latency model in virtual time (testing/synctest) and returns the records
// a client would write: each request sleeps on its own, with no shared step.
func simulateLoadServer(t *testing.T, s *loadServer, levels []int, perLevel int, seed uint64) []results.Record {
	t.Helper()
	var recs []results.Record
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 1))
		t0 := time.Now()
		time.Sleep(time.Millisecond) // offsets > 0: the harness's 0 means "did not happen"
		var mu sync.Mutex
		for li, c := range levels {
			type item struct{ nin, nout int }
			items := make([]item, perLevel)
			for i := range items {
				items[i] = item{100 + rng.IntN(700), 6 + rng.IntN(9)}
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range c {
				wg.Go(func() {
					wrng := rand.New(rand.NewPCG(seed, uint64(100*li+w+2)))
					for {
						i := int(next.Add(1) - 1)
						if i >= perLevel {
							return
						}
						r := s.serveVirtual(wrng, t0, items[i].nin, items[i].nout)
						r.ID, r.Step, r.Concurrency = fmt.Sprintf("s%d-%d", li, i), li, c
						mu.Lock()
						recs = append(recs, r)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond)
		}
	})
	sort.Slice(recs, func(a, b int) bool { return recs[a].SentNS < recs[b].SentNS })
	return recs
}

// serveVirtual is one request of the loadServer's model, timed in the
// bubble's virtual time, as a client's record.
func (s *loadServer) serveVirtual(rng *rand.Rand, t0 time.Time, nin, nout int) results.Record {
	sent := int64(time.Since(t0))
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	ttft := s.ttftBase + time.Duration(n-1)*s.ttftPerReq + time.Duration(nin)*s.ttftPerPromptToken
	time.Sleep(s.jitter(rng, ttft))
	times := []int64{int64(time.Since(t0))}
	for range nout - 1 {
		m := s.inFlight.Load()
		time.Sleep(s.jitter(rng, s.itlBase+time.Duration(m-1)*s.itlPerReq))
		times = append(times, int64(time.Since(t0)))
	}
	r := results.Record{
		Target: "srv", Scenario: "concurrency", API: "chat", Stream: true,
		IntendedNS: sent, SentNS: sent, FirstTokenNS: times[0], LastTokenNS: times[len(times)-1],
		DoneNS: times[len(times)-1], NIn: nin, NOut: nout, NOutCounted: nout, UsageReported: true, Status: 200,
	}
	for j := 1; j < len(times); j++ {
		r.ChunkGapsNS = append(r.ChunkGapsNS, times[j]-times[j-1])
	}
	return r
}
