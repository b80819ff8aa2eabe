package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Dist is a distribution of token counts, written as a short spec:
//
//	fixed:128            always 128
//	uniform:64,256       uniform integers in [64, 256]
//	normal:128,32        normal with mean 128 and standard deviation 32
//	lognormal:128,64     lognormal whose own mean is 128 and standard deviation 64
//	empirical:FILE       drawn from the integers in FILE (one per line, or a JSON array)
//
// Samples are rounded and never below 1. Dist is a flag.Value and reads and
// writes itself as that string in YAML and JSON, so plans and run.json keep
// the spec the user wrote.
type Dist struct {
	Kind   string  // fixed, uniform, normal, lognormal or empirical
	A, B   float64 // parameters: value; min,max; mean,sd
	File   string  // empirical: the file the values came from
	values []int   // empirical: the values, loaded by Set
}

// ParseDist parses a distribution spec (see Dist).
func ParseDist(s string) (Dist, error) {
	var d Dist
	err := d.Set(s)
	return d, err
}

// Set parses s into d; it implements flag.Value.
func (d *Dist) Set(s string) error {
	// A bare number is a fixed length, as every peer tool takes it.
	if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
		s = "fixed:" + strings.TrimSpace(s)
	}
	kind, args, _ := strings.Cut(strings.TrimSpace(s), ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	nums := func(want int) ([]float64, error) {
		parts := strings.Split(args, ",")
		if args == "" || len(parts) != want {
			return nil, fmt.Errorf("distribution %q: %s takes %d number(s), e.g. %s", s, kind, want, distExample[kind])
		}
		out := make([]float64, want)
		for i, p := range parts {
			v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("distribution %q: %q is not a number", s, p)
			}
			out[i] = v
		}
		return out, nil
	}
	var nd Dist
	switch kind {
	case "fixed":
		v, err := nums(1)
		if err != nil {
			return err
		}
		if v[0] < 1 {
			return fmt.Errorf("distribution %q: fixed value must be at least 1", s)
		}
		nd = Dist{Kind: kind, A: v[0]}
	case "uniform":
		v, err := nums(2)
		if err != nil {
			return err
		}
		if v[0] < 1 || v[1] < v[0] {
			return fmt.Errorf("distribution %q: uniform needs 1 <= min <= max", s)
		}
		nd = Dist{Kind: kind, A: v[0], B: v[1]}
	case "normal", "lognormal":
		v, err := nums(2)
		if err != nil {
			return err
		}
		if v[0] <= 0 || v[1] < 0 {
			return fmt.Errorf("distribution %q: %s needs mean > 0 and sd >= 0", s, kind)
		}
		nd = Dist{Kind: kind, A: v[0], B: v[1]}
	case "empirical":
		if args == "" {
			return fmt.Errorf("distribution %q: empirical needs a file, e.g. %s", s, distExample[kind])
		}
		vals, err := readCounts(args)
		if err != nil {
			return fmt.Errorf("distribution %q: %w", s, err)
		}
		nd = Dist{Kind: kind, File: args, values: vals}
	default:
		return fmt.Errorf(
			"distribution %q: unknown kind %q (want fixed, uniform, normal, lognormal or empirical)",
			s,
			kind,
		)
	}
	*d = nd
	return nil
}

var distExample = map[string]string{
	"fixed": "fixed:128", "uniform": "uniform:64,256", "normal": "normal:128,32",
	"lognormal": "lognormal:128,64", "empirical": "empirical:lengths.txt",
}

// readCounts loads an empirical distribution's values.
func readCounts(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var vals []int
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "[") {
		if err := json.Unmarshal([]byte(t), &vals); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else {
		sc := bufio.NewScanner(strings.NewReader(t))
		for line := 1; sc.Scan(); line++ {
			f := strings.TrimSpace(sc.Text())
			if f == "" || strings.HasPrefix(f, "#") {
				continue
			}
			v, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %q is not an integer", path, line, f)
			}
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("%s: no values", path)
	}
	for _, v := range vals {
		if v < 1 {
			return nil, fmt.Errorf("%s: value %d is below 1", path, v)
		}
	}
	slices.Sort(vals)
	return vals, nil
}

// String returns the spec d was parsed from.
func (d Dist) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	switch d.Kind {
	case "":
		return ""
	case "fixed":
		return "fixed:" + f(d.A)
	case "empirical":
		return "empirical:" + d.File
	default:
		return d.Kind + ":" + f(d.A) + "," + f(d.B)
	}
}

// IsZero reports whether d was never set.
func (d Dist) IsZero() bool { return d.Kind == "" }

// Mean is the distribution's expected value before rounding and clamping.
func (d Dist) Mean() float64 {
	switch d.Kind {
	case "fixed", "normal", "lognormal":
		return d.A
	case "uniform":
		return (d.A + d.B) / 2
	case "empirical":
		s := 0
		for _, v := range d.values {
			s += v
		}
		return float64(s) / float64(len(d.values))
	}
	return 0
}

// Sample draws one value (at least 1) using r.
func (d Dist) Sample(r *rand.Rand) int {
	var v float64
	switch d.Kind {
	case "fixed":
		v = d.A
	case "uniform":
		lo, hi := int(math.Round(d.A)), int(math.Round(d.B))
		return max(1, lo+r.IntN(hi-lo+1))
	case "normal":
		v = d.A + d.B*r.NormFloat64()
	case "lognormal":
		// Parameters are the mean and sd of the values themselves, which is
		// what users know from their logs; convert to the underlying normal.
		s2 := math.Log(1 + d.B*d.B/(d.A*d.A))
		v = math.Exp(math.Log(d.A) - s2/2 + math.Sqrt(s2)*r.NormFloat64())
	case "empirical":
		return d.values[r.IntN(len(d.values))]
	default:
		return 1
	}
	return max(1, int(math.Round(v)))
}

// MarshalText writes d as its spec.
func (d Dist) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a spec; an empty one is the unset Dist (run.json
// writes unset distributions that way).
func (d *Dist) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Dist{}
		return nil
	}
	return d.Set(string(b))
}
