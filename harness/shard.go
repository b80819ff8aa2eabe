package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/harness/results"
)

// Shard makes a run one part of a plan driven from several load machines
// (scale-out). Every shard runs the same plan; together the Count shards
// send exactly the requests one process would:
//
//   - a closed-loop step of concurrency c gives shard i the workers w < c
//     with w mod Count = i (c/Count each, the remainder to the first
//     shards), and request g to the shard owning worker slot g mod c, so
//     each shard's share of requests matches its share of workers;
//   - an open-loop step gives request g to shard g mod Count, and every
//     shard computes the whole step's schedule from the plan's seed and
//     sends its own arrivals at their times: the shards' arrivals together
//     are the single process's schedule exactly, Poisson, gamma or
//     constant (independent Poisson shards at rate/Count would only be
//     Poisson in law, and independent gamma shards superpose to something
//     less bursty than the plan's gamma);
//   - every request's prompt and lengths come from the one per-step
//     sequence, drawn by every shard and built only by its owner.
//
// Shards start each step together through a coordinator (`testbed
// coordinate`): a barrier per step that hands out one start time on the
// coordinator's clock, which each shard converts with its measured clock
// offset. `testbed merge` joins the shards' results directories into one.
type Shard struct {
	Index int  `yaml:"index"                     json:"index"`
	Count int  `yaml:"count"                     json:"count"`
	Auto  bool `yaml:"auto,omitempty"            json:"auto,omitempty"` // the coordinator assigns Index
	// Coordinator is the base URL of `testbed coordinate`; without one the
	// shards start when they are started, their skew is still recorded
	// and merge judges it.
	Coordinator string `yaml:"coordinator,omitempty"     json:"coordinator,omitempty"`
	// BarrierTimeout bounds the wait for the other shards at each step
	// (default 2m); a step whose barrier fails starts unsynchronised and
	// is flagged.
	BarrierTimeout Duration `yaml:"barrier_timeout,omitempty" json:"barrier_timeout,omitempty"`
}

// ParseShard reads "I/N" (shard I of N, from 0) or "auto/N" (the
// coordinator assigns I).
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want I/N (shard I of N, from 0) or auto/N", s)
	}
	n, err := strconv.Atoi(b)
	if err != nil || n < 1 {
		return Shard{}, fmt.Errorf("shard %q: N must be a positive integer", s)
	}
	if a == "auto" {
		return Shard{Count: n, Auto: true}, nil
	}
	i, err := strconv.Atoi(a)
	if err != nil || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard %q: I must be an integer in 0..%d, or auto", s, n-1)
	}
	return Shard{Index: i, Count: n}, nil
}

// String writes s as ParseShard reads it.
func (s Shard) String() string {
	if s.Auto {
		return fmt.Sprintf("auto/%d", s.Count)
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// problem is the plan rule for the shard section.
func (s *Shard) problem(p *Plan) string {
	if s == nil {
		return ""
	}
	switch {
	case s.Count < 1 || s.Count > 10_000:
		return fmt.Sprintf("count %d is out of range 1..10000", s.Count)
	case !s.Auto && (s.Index < 0 || s.Index >= s.Count):
		return fmt.Sprintf("index %d is out of range 0..%d", s.Index, s.Count-1)
	case s.Auto && s.Coordinator == "":
		return "auto needs a coordinator to assign the index"
	case s.BarrierTimeout < 0:
		return "barrier_timeout is negative"
	}
	for _, st := range p.Steps() {
		if st.Rate == 0 && st.Concurrency < s.Count {
			return fmt.Sprintf("step %q has concurrency %d, less than the %d shards: every shard needs a worker",
				st.Label(), st.Concurrency, s.Count)
		}
		if st.MaxInFlight > 0 && st.MaxInFlight < s.Count {
			return fmt.Sprintf("max_in_flight %d is less than the %d shards", st.MaxInFlight, s.Count)
		}
	}
	return ""
}

// part is one shard's share of one step: the global request indices it
// owns. Indices run in cycles of length cycle (the step's concurrency, or
// the shard count for open loop); the shard owns the slots listed.
type part struct {
	cycle int
	slots []int // owned positions within a cycle, ascending
}

// partOf is shard i of n's share of st; n = 1 owns everything.
func partOf(st *Step, i, n int) part {
	cycle := n
	if st.Rate == 0 {
		cycle = max(st.Concurrency, n)
	}
	p := part{cycle: cycle}
	for w := range cycle {
		if w%n == i {
			p.slots = append(p.slots, w)
		}
	}
	return p
}

// owns reports whether global request index g is this shard's.
func (p part) owns(g int) bool {
	pos := g % p.cycle
	for _, s := range p.slots {
		if s == pos {
			return true
		}
	}
	return false
}

// global is the k-th (from 0) global index this shard owns.
func (p part) global(k int) int {
	m := len(p.slots)
	return k/m*p.cycle + p.slots[k%m]
}

// count is how many global indices below total this shard owns.
func (p part) count(total int) int {
	n := total / p.cycle * len(p.slots)
	for _, s := range p.slots {
		if s < total%p.cycle {
			n++
		}
	}
	return n
}

// workers is the shard's share of a closed-loop step's concurrency.
func (p part) workers() int { return len(p.slots) }

// share splits v among n shards, the remainder to the first: shard i's part.
func share(v, i, n int) int {
	s := v / n
	if i < v%n {
		s++
	}
	return s
}

// joinShards joins the coordinator of a sharded plan (taking the index it
// assigns when auto) and prepares run.json's shard record.
func (r *runner) joinShards(ctx context.Context) error {
	s := r.plan.Shard
	if s == nil {
		return nil
	}
	if s.Coordinator == "" {
		r.shard = &results.ShardInfo{Index: s.Index, Count: s.Count}
	} else {
		c, err := joinCoordinator(ctx, s)
		if err != nil {
			return err
		}
		r.coord = c
		r.shard = &c.info
	}
	r.shardI = s.Index
	r.shard.Host, _ = os.Hostname()
	return nil
}

// shardDir puts the shard's index into an output directory that asks for
// it with {shard}, e.g. /results/shard-{shard}: replicas given auto learn
// their index only from the coordinator.
func (r *runner) shardDir(dir string) string {
	if r.shard == nil {
		return dir
	}
	return strings.ReplaceAll(dir, "{shard}", strconv.Itoa(r.shard.Index))
}

// syncStep starts a shard's step with the others: at the coordinator's
// barrier when there is one, else at once, recording the start either way.
func (r *runner) syncStep(ctx context.Context, step int) {
	switch {
	case r.coord != nil:
		r.coord.waitStep(ctx, step)
	case r.shard != nil:
		r.shard.Steps = append(r.shard.Steps, results.ShardStep{Step: step, Start: time.Now().UTC()})
	}
}
