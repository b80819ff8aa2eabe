package fit

import "sort"

// burst is a set of chunk arrivals taken as one engine step.
type burst struct {
	members []int // indices into the sorted arrivals, in time order
	end     int64 // earliest arrival: the chunk that met the least delay
	stall   bool  // from a catch-up: the step's end is not observable
}

// cutBursts groups sorted arrival times where consecutive arrivals are at
// most gap apart.
func cutBursts(times []int64, gap int64) []burst {
	var out []burst
	for i, t := range times {
		if i == 0 || t-times[i-1] > gap {
			out = append(out, burst{end: t})
		}
		b := &out[len(out)-1]
		b.members = append(b.members, i)
	}
	return out
}

// splitCoarse repairs bursts that hold two chunks of one request: in
// lockstep batching a sequence gets one token per step, so such a burst is
// several steps. Two causes, told apart by the widest gap between the
// request's two chunks:
//
//   - wide (≥ catchUp): two steps whose arrivals ran together (a busy
//     server or client spreads a step's writes or reads); the burst is cut
//     at that gap, in time order;
//   - narrow: a catch-up. The server paused (GC, a descheduled process) and
//     then wrote each stream's overdue tokens back to back, so the steps'
//     chunks interleave by stream, not by time. The burst becomes one step
//     per repetition, step j holding each request's j-th chunk, all marked
//     stall: their counts are right, their times are not.
//
// It returns the repaired bursts, the number of time cuts and of catch-ups.
func splitCoarse(times []int64, reqOf []int32, bs []burst, nreq int, catchUp int64) ([]burst, int, int) {
	count := make([]int, nreq)
	var out []burst
	splits, catchUps := 0, 0
	stack := make([]burst, 0, 8)
	for b := len(bs) - 1; b >= 0; b-- {
		stack = append(stack, bs[b])
	}
	for len(stack) > 0 {
		b := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// The first request seen twice, and where its two chunks are.
		first, second := -1, -1
		for pos, i := range b.members {
			r := reqOf[i]
			if count[r] > 0 {
				second = pos
				for q := 0; q < pos; q++ {
					if reqOf[b.members[q]] == r {
						first = q
						break
					}
				}
				break
			}
			count[r]++
		}
		for _, i := range b.members {
			count[reqOf[i]] = 0
		}
		if second < 0 {
			out = append(out, b)
			continue
		}
		at, widest := second, int64(-1)
		for q := first + 1; q <= second; q++ {
			if g := times[b.members[q]] - times[b.members[q-1]]; g > widest {
				at, widest = q, g
			}
		}
		if widest >= catchUp {
			splits++
			lo := burst{members: b.members[:at:at], end: times[b.members[0]], stall: b.stall}
			hi := burst{members: b.members[at:], end: times[b.members[at]], stall: b.stall}
			stack = append(stack, hi, lo)
			continue
		}
		catchUps++
		var groups []burst
		for _, i := range b.members {
			r := reqOf[i]
			j := count[r]
			count[r]++
			if j == len(groups) {
				groups = append(groups, burst{end: times[i], stall: true})
			}
			g := &groups[j]
			g.members = append(g.members, i)
			g.end = min(g.end, times[i])
		}
		for _, i := range b.members {
			count[reqOf[i]] = 0
		}
		out = append(out, groups...)
	}
	return out, splits, catchUps
}

// rejoinLate merges into the burst before it every burst that can only be
// the late tail of that one: it shares no request with it, some of its
// requests skipped that burst (their previous chunk is older), and it
// followed within less than a short step. In lockstep batching a running
// sequence never skips a step, so a chunk that seems to is a chunk of the
// step before that the client read late. Catch-up steps are left alone.
// It returns the bursts and the number merged.
func rejoinLate(reqOf []int32, bs []burst, within int64, nreq int) ([]burst, int) {
	last := make([]int, nreq) // kept burst of the request's latest chunk, +1
	var kept []burst
	merged := 0
	for _, b := range bs {
		p := len(kept) - 1
		join := false
		if p >= 0 && !b.stall && !kept[p].stall && b.end-kept[p].end < within {
			clash, skipped := false, false
			for _, i := range b.members {
				switch lb := last[reqOf[i]] - 1; {
				case lb == p:
					clash = true
				case lb >= 0 && lb < p:
					skipped = true
				}
			}
			join = !clash && skipped
		}
		if join {
			k := &kept[p]
			k.members = append(k.members, b.members...)
			sort.Ints(k.members)
			merged++
		} else {
			kept = append(kept, b)
			p = len(kept) - 1
		}
		for _, i := range b.members {
			last[reqOf[i]] = p + 1
		}
	}
	return kept, merged
}
