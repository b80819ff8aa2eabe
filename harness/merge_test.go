package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// runTwoShards runs a small plan as two shards in this process, against
// the fixed-mode mock, and returns their directories.
func runTwoShards(t *testing.T) (harness.Plan, []string) {
	t.Helper()
	_, srv := fixedMock(t, 5*time.Millisecond, time.Millisecond)
	p := basePlan(srv.URL)
	p.Dataset.OutputTokens, _ = harness.ParseDist("fixed:8")
	p.IgnoreEOS = true
	p.Load = harness.Load{Concurrency: []int{2}, Rate: []float64{100}, Requests: 10, Warmup: 2}
	dirs := []string{filepath.Join(t.TempDir(), "s0"), filepath.Join(t.TempDir(), "s1")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			sp := p
			sp.Targets = slices.Clone(p.Targets) // Run fills in the targets' defaults
			sp.Shard = &harness.Shard{Index: i, Count: 2}
			_, errs[i] = harness.Run(context.Background(), sp, dirs[i], harness.WithoutClientMonitor())
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return p, dirs
}

// editJSON rewrites dir's file through fn.
func editJSON[T any](t *testing.T, path string, fn func(*T)) {
	t.Helper()
	var v T
	if err := results.ReadJSON(path, &v); err != nil {
		t.Fatal(err)
	}
	fn(&v)
	if err := results.WriteJSON(path, v); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies a results directory, so each case edits its own.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestMerge merges two in-process shards: as they are, and with one
// shard's files edited the way a real run can go wrong.
func TestMerge(t *testing.T) {
	t.Parallel()
	plan, dirs := runTwoShards(t)
	tests := []struct {
		name    string
		edit    func(t *testing.T, s1 string) // applied to shard 1's copy
		wantErr string                        // merge must refuse
		check   func(t *testing.T, out *harness.Outcome)
	}{
		{
			// the shards together are the plan: every request once, counts summed
			name: "as run",
			check: func(t *testing.T, out *harness.Outcome) {
				for _, s := range out.Summary.Steps {
					if s.Requests != plan.Load.Requests || s.Warmup != plan.Load.Warmup || s.OK != s.Requests {
						t.Errorf("step %d: requests %d ok %d warmup %d; want %d, all ok, %d warm-up",
							s.Step, s.Requests, s.OK, s.Warmup, plan.Load.Requests, plan.Load.Warmup)
					}
					if s.OutputTokens != int64(8*s.OK) || s.WindowS <= 0 {
						t.Errorf("step %d: %d output tokens over %g s", s.Step, s.OutputTokens, s.WindowS)
					}
				}
				if out.Info.Records != int64(len(plan.Steps())*(plan.Load.Requests+plan.Load.Warmup)) {
					t.Errorf("%d records merged", out.Info.Records)
				}
			},
		},
		{
			// a shard that started a step late is flagged, not hidden
			name: "skewed start",
			edit: func(t *testing.T, s1 string) {
				editJSON(t, filepath.Join(s1, results.RunFile), func(ri *results.RunInfo[harness.Plan]) {
					ri.Shard.Steps[0].Start = ri.Shard.Steps[0].Start.Add(300 * time.Millisecond)
				})
			},
			check: func(t *testing.T, out *harness.Outcome) {
				ms := out.Info.Merge.Steps[0]
				if ms.StartSpreadNS < int64(250*time.Millisecond) || !strings.Contains(strings.Join(ms.Problems, ";"), "apart") {
					t.Errorf("step 0 merge %+v: want the 300 ms skew flagged", ms)
				}
				if !strings.Contains(strings.Join(out.Summary.Steps[0].Warnings, ";"), "started") {
					t.Errorf("step 0 warnings %q: want the skew", out.Summary.Steps[0].Warnings)
				}
			},
		},
		{
			// a shard's client-bound verdict stays with its shard
			name: "client-bound shard",
			edit: func(t *testing.T, s1 string) {
				editJSON(t, filepath.Join(s1, results.SummaryFile), func(s *results.Summary) {
					s.Steps[1].ClientBound = true
					s.Steps[1].ClientBoundReason = "client CPU 95%"
				})
			},
			check: func(t *testing.T, out *harness.Outcome) {
				s := out.Summary.Steps[1]
				if !s.ClientBound || s.ClientBoundReason != "shard 1/2: client CPU 95%" {
					t.Errorf("step 1 client-bound %v %q", s.ClientBound, s.ClientBoundReason)
				}
			},
		},
		{
			// a directory of another plan is refused
			name: "other plan",
			edit: func(t *testing.T, s1 string) {
				editJSON(t, filepath.Join(s1, results.RunFile), func(ri *results.RunInfo[harness.Plan]) {
					ri.Plan.Seed++
				})
			},
			wantErr: "different plan",
		},
		{
			// the same shard twice is refused
			name: "shard twice",
			edit: func(t *testing.T, s1 string) {
				editJSON(t, filepath.Join(s1, results.RunFile), func(ri *results.RunInfo[harness.Plan]) {
					ri.Shard.Index = 0
				})
			},
			wantErr: "each of 0..1 once",
		},
		{
			// a plain run is not a shard
			name: "not a shard",
			edit: func(t *testing.T, s1 string) {
				editJSON(t, filepath.Join(s1, results.RunFile), func(ri *map[string]json.RawMessage) {
					delete(*ri, "shard")
				})
			},
			wantErr: "is not a shard",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s0 := copyDir(t, dirs[0])
			s1 := copyDir(t, dirs[1])
			if tt.edit != nil {
				tt.edit(t, s1)
			}
			out, err := harness.Merge([]string{s1, s0}, filepath.Join(t.TempDir(), "merged"), harness.MergeOptions{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("merge: %v; want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, out)
		})
	}
}
