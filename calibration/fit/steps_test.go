package fit

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
		gap       int64   // the gap rule's threshold
		wantEnds  []int64 // after splitting and rejoining
		wantStall []bool
		wantSplit int
		wantCatch int
		wantJoin  int
	}{
		// Two steps ran together (requests 0 and 1 twice in one burst): cut
		// at the widest gap between request 0's chunks, between 12 and 20.
		{
			"split",
			[]int64{10, 11, 12, 20, 21},
			[]int32{0, 1, 2, 0, 1},
			10,
			[]int64{10, 20},
			[]bool{false, false},
			1,
			0,
			0,
		},
		// A pause, then each stream's two overdue chunks written back to
		// back (0,0 then 1,1 then 2,2): two stall steps, each with every
		// request once, not cuts in time order.
		{
			"catch-up",
			[]int64{100, 101, 110, 111, 120, 121},
			[]int32{0, 0, 1, 1, 2, 2},
			50,
			[]int64{100, 101},
			[]bool{true, true},
			0,
			1,
			0,
		},
		// Request 2's chunk of the second step came late, alone: it seems to
		// skip that step, which a running sequence never does, so it rejoins
		// the burst before.
		{
			"late tail",
			[]int64{0, 1, 2, 10, 11, 16, 30, 31, 32},
			[]int32{0, 1, 2, 0, 1, 2, 0, 1, 2},
			3,
			[]int64{0, 10, 30},
			[]bool{false, false, false},
			0,
			0,
			1,
		},
		// A genuine step: its requests were all in the step before.
		{"genuine", []int64{10, 11, 30, 31}, []int32{0, 1, 0, 1}, 5, []int64{10, 30}, []bool{false, false}, 0, 0, 0},
		// A new request's first chunk alone after a step is a step of its
		// own (it skipped nothing).
		{"new request", []int64{10, 11, 16}, []int32{0, 1, 2}, 3, []int64{10, 16}, []bool{false, false}, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bs := cutBursts(tc.times, tc.gap)
			bs, split, catch := splitCoarse(tc.times, tc.reqs, bs, 3, tc.gap/5)
			bs, joined := rejoinLate(tc.reqs, bs, 3*tc.gap, 3)
			var ends []int64
			var stall []bool
			for _, b := range bs {
				ends, stall = append(ends, b.end), append(stall, b.stall)
				seen := map[int32]bool{}
				for _, i := range b.members {
					if seen[tc.reqs[i]] {
						t.Errorf("burst %v holds request %d twice", b.members, tc.reqs[i])
					}
					seen[tc.reqs[i]] = true
				}
			}
			if !reflect.DeepEqual(ends, tc.wantEnds) || !reflect.DeepEqual(stall, tc.wantStall) ||
				split != tc.wantSplit || catch != tc.wantCatch || joined != tc.wantJoin {
				t.Errorf(
					"ends %v stall %v split %d catch-ups %d joined %d; want %v %v %d %d %d",
					ends,
					stall,
					split,
					catch,
					joined,
					tc.wantEnds,
					tc.wantStall,
					tc.wantSplit,
					tc.wantCatch,
					tc.wantJoin,
				)
			}
		})
	}
}
