package calibration

import (
	"reflect"
	"testing"
)

// Bursts are repaired with the lockstep rule: one chunk per request per step.
func TestBurstRepair(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		times     []int64
		reqs      []int32
		cuts      []int // bursts found by the gap rule
		wantCuts  []int // after splitting
		wantEnds  []int64
		wantSplit int
		wantJoin  int
	}{
		// Two steps ran together (requests 0 and 1 twice in one burst): split
		// at the widest gap, between 12 and 20.
		{"split", []int64{10, 11, 12, 20, 21}, []int32{0, 1, 2, 0, 1}, []int{0}, []int{0, 3}, []int64{10, 20}, 1, 0},
		// Request 2's chunk of the second step came late, alone: it seems to
		// skip that step, which a running sequence never does, so it rejoins
		// the burst before.
		{"late tail", []int64{0, 1, 2, 10, 11, 16, 30, 31, 32}, []int32{0, 1, 2, 0, 1, 2, 0, 1, 2}, []int{0, 3, 5, 6}, []int{0, 3, 5, 6}, []int64{0, 10, 30}, 0, 1},
		// A genuine step: its requests were all in the step before.
		{"genuine", []int64{10, 11, 30, 31}, []int32{0, 1, 0, 1}, []int{0, 2}, []int{0, 2}, []int64{10, 30}, 0, 0},
		// A new request's first chunk alone after a step is a step of its
		// own (it skipped nothing).
		{"new request", []int64{10, 11, 16}, []int32{0, 1, 2}, []int{0, 2}, []int{0, 2}, []int64{10, 16}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cuts, split := splitCoarse(tc.times, tc.reqs, tc.cuts, 3)
			if !reflect.DeepEqual(cuts, tc.wantCuts) || split != tc.wantSplit {
				t.Fatalf("splitCoarse = %v, %d; want %v, %d", cuts, split, tc.wantCuts, tc.wantSplit)
			}
			burstOf := make([]int, len(tc.times))
			var ends []int64
			for b, c := range cuts {
				ends = append(ends, tc.times[c])
				for i := c; i < len(tc.times); i++ {
					burstOf[i] = b
				}
			}
			ends, joined := rejoinLate(tc.reqs, burstOf, ends, 15, 3)
			if !reflect.DeepEqual(ends, tc.wantEnds) || joined != tc.wantJoin {
				t.Errorf("rejoinLate = %v, %d; want %v, %d", ends, joined, tc.wantEnds, tc.wantJoin)
			}
		})
	}
}
