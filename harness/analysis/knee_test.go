package analysis

import "testing"

// ladder builds points from parallel slices; SLOs met and no errors unless set.
func ladder(loads, thr, ttft, e2e []float64) []LadderPoint {
	p := make([]LadderPoint, len(loads))
	for i := range loads {
		p[i] = LadderPoint{Load: loads[i], Throughput: thr[i], TTFTP99: ttft[i], E2EP99: e2e[i], MeetsSLO: true}
	}
	return p
}

func val(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func TestFindKnee(t *testing.T) {
	t.Parallel()
	// A server with 32 batch slots: throughput grows linearly to 32, then
	// flat; past 32, requests queue behind whole requests, so TTFT jumps by
	// about one E2E and E2E grows with load (Little's law).
	loads := []float64{1, 8, 16, 24, 32, 40, 48, 64}
	sat := ladder(loads,
		[]float64{100, 800, 1590, 2370, 3150, 3160, 3155, 3170},
		[]float64{20, 21, 22, 23, 25, 1040, 1080, 2100},
		[]float64{1000, 1010, 1020, 1030, 1040, 1300, 1560, 2080})
	sloFail := ladder(loads,
		[]float64{100, 800, 1590, 2370, 3150, 3160, 3155, 3170},
		[]float64{20, 21, 22, 23, 25, 1040, 1080, 2100},
		[]float64{1000, 1010, 1020, 1030, 1040, 1300, 1560, 2080})
	sloFail[4].MeetsSLO = false // the E2E SLO fails at 32
	errs := ladder(loads,
		[]float64{100, 800, 1590, 2370, 3150, 3160, 3155, 3170},
		[]float64{20, 21, 22, 23, 25, 1040, 1080, 2100},
		[]float64{1000, 1010, 1020, 1030, 1040, 1300, 1560, 2080})
	errs[3].ErrorRate, errs[4].ErrorRate = 0.05, 0.05 // 429s at 24 and 32
	cases := []struct {
		name                   string
		pts                    []LadderPoint
		opt                    KneeOptions
		thrKnee, latKnee, best float64 // -1: none
		elbow                  float64
		metric                 string
	}{
		// The knee at the batch limit; latency takes off one step later.
		{"saturating", sat, KneeOptions{}, 32, 40, 32, 32, "ttft_p99"},
		// An SLO failure at the knee moves the operating point down.
		{"slo fails at knee", sloFail, KneeOptions{}, 32, 40, 24, 32, "ttft_p99"},
		// Errors above 1 % disqualify steps as operating points.
		{"errors", errs, KneeOptions{}, 32, 40, 16, 32, "ttft_p99"},
		// Still scaling at the top of the ladder: no knee, best is the top.
		{"linear", ladder([]float64{1, 2, 4, 8},
			[]float64{10, 20, 40, 80}, []float64{5, 5, 5, 5}, []float64{50, 50, 51, 50}),
			KneeOptions{}, -1, -1, 8, -1, ""},
		// Only E2E takes off (no TTFT data, e.g. non-streaming).
		{"e2e only", ladder([]float64{1, 2, 4, 8},
			[]float64{10, 20, 22, 23}, []float64{0, 0, 0, 0}, []float64{50, 52, 90, 170}),
			KneeOptions{}, 2, 8, 2, 2, "e2e_p99"},
		// A stricter gain threshold finds the knee earlier on a soft curve.
		{"soft curve, strict", ladder([]float64{1, 2, 3, 4},
			[]float64{10, 19, 25, 28}, []float64{5, 5, 5, 5}, []float64{50, 50, 50, 50}),
			KneeOptions{MinGain: 0.7}, 2, -1, 2, -1, ""},
		// A noisy P99 that doubles at one low step and falls back is not a
		// knee; the takeoff that persists is.
		{"noisy low step", ladder(
			[]float64{1, 8, 16, 32, 40, 48},
			[]float64{
				100,
				800,
				1600,
				3200,
				3210,
				3205,
			},
			[]float64{10, 37, 15, 20, 90, 200},
			[]float64{50, 52, 54, 60, 75, 90},
		),
			KneeOptions{}, 32, 40, 32, 32, "ttft_p99"},
		// A step that dips below its neighbours before saturation is noise,
		// not a knee: throughput grows again after it.
		{"dip before saturation", ladder(
			[]float64{1, 8, 16, 24, 32, 48, 64},
			[]float64{
				100,
				800,
				900,
				2400,
				3200,
				3250,
				3190,
			},
			[]float64{5, 5, 5, 5, 5, 50, 90},
			[]float64{50, 50, 50, 50, 50, 80, 110},
		),
			KneeOptions{}, 32, 48, 32, 32, "ttft_p99"},
		// TTFT of one prefill step (8 ms) doubles as soon as requests arrive
		// mid-step, without any queueing: that is not a latency knee.
		{"step alignment", ladder([]float64{1, 8, 16, 32, 48},
			[]float64{120, 900, 1800, 3300, 3500}, []float64{8, 18, 20, 40, 160}, []float64{140, 150, 155, 170, 260}),
			KneeOptions{}, 32, 48, 32, 32, "ttft_p99"},
		// Unsorted input is sorted by load.
		{"unsorted", []LadderPoint{sat[5], sat[0], sat[3], sat[4], sat[7], sat[1], sat[2], sat[6]},
			KneeOptions{}, 32, 40, 32, 32, "ttft_p99"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := FindKnee("t", LadderConcurrency, c.pts, c.opt)
			if val(k.ThroughputKnee) != c.thrKnee || val(k.LatencyKnee) != c.latKnee ||
				val(k.BestOperatingPoint) != c.best || val(k.LatencyElbow) != c.elbow || k.LatencyMetric != c.metric {
				t.Errorf(
					"got throughput knee %v, latency knee %v (%s), best %v, elbow %v; want %v, %v (%s), %v, %v",
					val(
						k.ThroughputKnee,
					),
					val(k.LatencyKnee),
					k.LatencyMetric,
					val(k.BestOperatingPoint),
					val(k.LatencyElbow),
					c.thrKnee,
					c.latKnee,
					c.metric,
					c.best,
					c.elbow,
				)
			}
		})
	}
}

func TestFindKneeEmpty(t *testing.T) {
	t.Parallel()
	k := FindKnee("t", LadderRate, nil, KneeOptions{})
	if k.ThroughputKnee != nil || k.LatencyKnee != nil || k.BestOperatingPoint != nil || k.Steps != 0 {
		t.Errorf("empty ladder: %+v", k)
	}
}

func TestKneedle(t *testing.T) {
	t.Parallel()
	x := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name  string
		y     []float64
		shape int
		want  int
	}{
		{
			"concave saturation",
			[]float64{0, 4, 7, 8, 8.3, 8.5, 8.6, 8.6, 8.7},
			Concave,
			2,
		}, // farthest above the diagonal: (0.25, 0.80)
		{"convex takeoff", []float64{1, 1, 1, 1, 1.1, 2, 4, 8, 16}, Convex, 5}, // bends upward at x=5
		{"straight line", []float64{0, 1, 2, 3, 4, 5, 6, 7, 8}, Convex, -1},    // no knee
		{"flat", []float64{3, 3, 3, 3, 3, 3, 3, 3, 3}, Concave, -1},
		{"noise around a level", []float64{50, 50, 51, 50, 50, 50.5, 50, 50, 50}, Convex, -1}, // no range
		{"too short", []float64{0, 1}, Concave, -1},                                           // needs 3 points
	}
	for _, c := range cases {
		if got := Kneedle(x[:len(c.y)], c.y, c.shape); got != c.want {
			t.Errorf("%s: Kneedle = %d, want %d", c.name, got, c.want)
		}
	}
}
