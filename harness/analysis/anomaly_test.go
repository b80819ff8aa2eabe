package analysis

import (
	"math/rand/v2"
	"slices"
	"testing"
)

const msNS = int64(1e6) // one millisecond in ns

// stream builds one successful streamed request: sent at 0, first byte at
// fb, first token at ft, with the given chunk gaps and output tokens.
func stream(group string, fb, ft int64, gaps []int64, outTokens int) StreamSample {
	return StreamSample{Target: "t", Group: group, SentNS: 1, FirstByteNS: fb, FirstTokenNS: ft,
		ChunkGapsNS: gaps, OutputTokens: outTokens}
}

// jittered returns n gaps around mean with a ±spread uniform jitter (seeded).
func jittered(r *rand.Rand, n int, mean, spread int64) []int64 {
	g := make([]int64, n)
	for i := range g {
		g[i] = mean - spread + r.Int64N(2*spread+1)
	}
	return g
}

func TestDetectAnomalies(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	many := func(n int, f func(i int) StreamSample) []StreamSample {
		s := make([]StreamSample, n)
		for i := range s {
			s[i] = f(i)
		}
		return s
	}
	cases := []struct {
		name    string
		samples []StreamSample
		want    map[string]int // kind → affected requests
	}{
		// A healthy engine: ITL 20 msNS ± 4 msNS, one token per chunk, first byte
		// with the first token: nothing to report.
		{"healthy", many(10, func(int) StreamSample {
			return stream("c=1", 100*msNS, 100*msNS, jittered(r, 63, 20*msNS, 4*msNS), 64)
		}), map[string]int{}},
		// A proxy re-timing output at exactly 50 msNS.
		{"fixed pacing", many(10, func(int) StreamSample {
			return stream("c=1", 100*msNS, 100*msNS, jittered(r, 63, 50*msNS, 0), 64)
		}), map[string]int{AnomalyPacing: 10}},
		// Two of ten streams pause 2 s mid-way.
		{"stalls", many(10, func(i int) StreamSample {
			g := jittered(r, 63, 20*msNS, 4*msNS)
			if i < 2 {
				g[30] = 2000 * msNS
			}
			return stream("c=1", 100*msNS, 100*msNS, g, 64)
		}), map[string]int{AnomalyStall: 2}},
		// Four tokens per SSE event: 16 chunks for 64 tokens.
		{"multi-token chunks", many(10, func(int) StreamSample {
			return stream("c=1", 100*msNS, 100*msNS, jittered(r, 15, 80*msNS, 10*msNS), 64)
		}), map[string]int{AnomalyMultiToken: 10}},
		// Headers flushed at 5 msNS, first token at 400 msNS.
		{"early first byte", many(10, func(int) StreamSample {
			return stream("c=1", 5*msNS, 400*msNS, jittered(r, 63, 20*msNS, 4*msNS), 64)
		}), map[string]int{AnomalyLateFirstToken: 10}},
		// Three streams cut after some tokens, one cut before any (not mid-stream).
		{"stream cuts", many(10, func(i int) StreamSample {
			s := stream("c=1", 100*msNS, 100*msNS, jittered(r, 63, 20*msNS, 4*msNS), 64)
			switch {
			case i < 3:
				s.ErrorClass, s.ChunkGapsNS, s.OutputTokens = "stream_cut", s.ChunkGapsNS[:9], 10
			case i == 3:
				s.ErrorClass = "stream_cut"
				s.FirstTokenNS = 0
				s.ChunkGapsNS = nil
				s.OutputTokens = 0
			}
			return s
		}), map[string]int{AnomalyStreamCut: 3}},
		// Too few gaps to judge pacing (49 < 50).
		{"short streams", many(7, func(int) StreamSample {
			return stream("c=1", 100*msNS, 100*msNS, jittered(r, 7, 50*msNS, 0), 8)
		}), map[string]int{}},
	}
	for _, c := range cases {
		got := map[string]int{}
		for _, a := range DetectAnomalies(c.samples, AnomalyOptions{}) {
			got[a.Kind] = a.Affected
			if a.Of != len(c.samples) || a.Detail == "" {
				t.Errorf("%s: %s: of %d detail %q", c.name, a.Kind, a.Of, a.Detail)
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			continue
		}
		for k, n := range c.want {
			if got[k] != n {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		}
	}
}

func TestDetectAnomaliesGroups(t *testing.T) {
	t.Parallel()
	// Pacing in one group must not be diluted by, or leak into, another.
	r := rand.New(rand.NewPCG(3, 4))
	var s []StreamSample
	for range 10 {
		s = append(s, stream("b", 100*msNS, 100*msNS, jittered(r, 63, 20*msNS, 4*msNS), 64))
		s = append(s, stream("a", 100*msNS, 100*msNS, jittered(r, 63, 50*msNS, 0), 64))
	}
	got := DetectAnomalies(s, AnomalyOptions{})
	if len(got) != 1 || got[0].Group != "a" || got[0].Kind != AnomalyPacing || got[0].Value != 50 {
		t.Errorf("got %+v", got)
	}
}

func TestSelectRank(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 3, 10, 101, 1000} {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r.IntN(50)) // many ties
		}
		s := append([]float64(nil), v...)
		slices.Sort(s)
		for _, k := range []int{1, (n + 1) / 2, n} {
			w := append([]float64(nil), v...)
			if got := selectRank(w, k); got != s[k-1] {
				t.Errorf("n=%d k=%d: %v, want %v", n, k, got, s[k-1])
			}
		}
	}
}
