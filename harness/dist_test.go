package harness

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	emp := filepath.Join(dir, "lens.txt")
	if err := os.WriteFile(emp, []byte("# lengths\n10\n20\n\n30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec      string
		mean, tol float64 // expected sample mean and tolerance
		lo, hi    int     // every sample within [lo, hi]
	}{
		// fixed is exact.
		{"fixed:128", 128, 0, 128, 128},
		// A bare number is fixed.
		{"64", 64, 0, 64, 64},
		// uniform integers, inclusive bounds.
		{"uniform:64,256", 160, 3, 64, 256},
		// normal around its mean; clamped at 1.
		{"normal:100,10", 100, 1, 1, 1 << 30},
		// lognormal parameters are the values' own mean and sd.
		{"lognormal:200,100", 200, 5, 1, 1 << 30},
		// empirical draws only the file's values.
		{"empirical:" + emp, 20, 1, 10, 30},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			d, err := ParseDist(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace("fixed:"+tc.spec, "fixed:fixed:", "fixed:", 1) // a bare number is written fixed:N
			if d.String() != tc.spec && d.String() != want {
				t.Errorf("String() = %q, want %q", d.String(), tc.spec)
			}
			r := rand.New(rand.NewPCG(1, 2))
			const n = 20000
			sum := 0.0
			for range n {
				v := d.Sample(r)
				if v < tc.lo || v > tc.hi {
					t.Fatalf("sample %d outside [%d, %d]", v, tc.lo, tc.hi)
				}
				sum += float64(v)
			}
			if m := sum / n; math.Abs(m-tc.mean) > tc.tol {
				t.Errorf("sample mean %.2f, want %.0f ± %.0f", m, tc.mean, tc.tol)
			}
		})
	}
}

func TestDistErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"poisson:3", "unknown kind"},               // not a length distribution
		{"fixed:0", "at least 1"},                   // lengths are positive
		{"uniform:10,5", "min <= max"},              // reversed bounds
		{"normal:abc,1", "not a number"},            // garbage
		{"lognormal:100", "takes 2 number(s)"},      // missing sd
		{"empirical:/no/such/file", "no such file"}, // missing file
		{"fixed", "takes 1 number(s)"},              // no value
		{"0", "at least 1"},                         // a bare number is fixed, and positive
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			_, err := ParseDist(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseDist(%q) = %v, want error containing %q", tc.spec, err, tc.want)
			}
		})
	}
}

func TestPacer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind       string
		burstiness float64
		cvLo, cvHi float64 // coefficient of variation of the gaps
	}{
		// constant: every gap equal.
		{ArrivalConstant, 1, 0, 1e-6},
		// Poisson: exponential gaps, CV 1.
		{ArrivalPoisson, 1, 0.95, 1.05},
		// gamma shape 0.25: CV 1/sqrt(0.25) = 2, burstier.
		{ArrivalGamma, 0.25, 1.85, 2.15},
		// gamma shape 4: CV 0.5, smoother.
		{ArrivalGamma, 4, 0.47, 0.53},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			const rate, n = 500.0, 40000
			p, err := NewPacer(tc.kind, rate, tc.burstiness, 42)
			if err != nil {
				t.Fatal(err)
			}
			prev := p.Next()
			if prev != 0 {
				t.Errorf("first offset %v, want 0", prev)
			}
			var sum, sum2 float64
			for range n {
				cur := p.Next()
				g := (cur - prev).Seconds()
				if g < 0 {
					t.Fatalf("schedule went backwards")
				}
				sum += g
				sum2 += g * g
				prev = cur
			}
			mean := sum / n
			cv := math.Sqrt(sum2/n-mean*mean) / mean
			if math.Abs(mean-1/rate)/(1/rate) > 0.03 {
				t.Errorf("mean gap %.6fs, want %.6fs ± 3%%", mean, 1/rate)
			}
			if cv < tc.cvLo || cv > tc.cvHi {
				t.Errorf("gap CV %.3f, want in [%.2f, %.2f]", cv, tc.cvLo, tc.cvHi)
			}
			// Same seed, same schedule.
			a, _ := NewPacer(tc.kind, rate, tc.burstiness, 9)
			b, _ := NewPacer(tc.kind, rate, tc.burstiness, 9)
			for range 100 {
				if a.Next() != b.Next() {
					t.Fatal("same seed gave different schedules")
				}
			}
		})
	}
	if _, err := NewPacer("gamma", 10, 0, 1); err == nil {
		t.Error("gamma with burstiness 0 accepted")
	}
	if _, err := NewPacer("poisson", 0, 1, 1); err == nil {
		t.Error("rate 0 accepted")
	}
}

func TestPacerN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind       string
		burstiness float64
		cvLo, cvHi float64
	}{
		{ArrivalPoisson, 1, 0.95, 1.05}, // still exponential-like gaps
		{ArrivalGamma, 0.25, 1.8, 2.2},  // still bursty
		{ArrivalConstant, 1, 0, 1e-6},   // unchanged
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			const rate, n = 500.0, 5000
			p, err := NewPacerN(tc.kind, rate, tc.burstiness, 7, n)
			if err != nil {
				t.Fatal(err)
			}
			offs := make([]float64, n)
			for i := range offs {
				offs[i] = p.Next().Seconds()
			}
			// n arrivals fill n/rate seconds: the last one lands within
			// a few mean gaps of the end, never after it.
			end := float64(n) / rate
			if offs[n-1] > end || offs[n-1] < end-20/rate {
				t.Errorf("last arrival at %.4fs, want just under %.4fs", offs[n-1], end)
			}
			var sum, sum2 float64
			for i := 1; i < n; i++ {
				g := offs[i] - offs[i-1]
				if g < 0 {
					t.Fatal("schedule went backwards")
				}
				sum += g
				sum2 += g * g
			}
			mean := sum / (n - 1)
			if cv := math.Sqrt(sum2/(n-1)-mean*mean) / mean; cv < tc.cvLo || cv > tc.cvHi {
				t.Errorf("gap CV %.3f, want in [%.2f, %.2f]", cv, tc.cvLo, tc.cvHi)
			}
			if next := p.Next().Seconds(); next <= offs[n-1] {
				t.Errorf("pacer past its list went backwards: %v after %v", next, offs[n-1])
			}
		})
	}
}
