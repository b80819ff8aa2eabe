package engine

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func mustPreset(t testing.TB, name string) Profile {
	t.Helper()
	p, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPresetsValid(t *testing.T) {
	t.Parallel()
	names := PresetNames()
	if want := []string{"ideal", "llama3-8b-a100", "llama3-8b-h100"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("PresetNames() = %v, want %v", names, want)
	}
	for _, n := range names {
		p := mustPreset(t, n)
		if p.Name != n {
			t.Errorf("preset %q has Name %q", n, p.Name)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("preset %q: %v", n, err)
		}
	}
	// 56 GiB of KV cache at 128 KiB per token, in 16-token blocks.
	if got := mustPreset(t, "llama3-8b-h100").KVCacheBlocks; got != 28672 {
		t.Errorf("h100 KVCacheBlocks = %d, want 28672", got)
	}
	if _, err := Preset("gpt-5"); err == nil || !strings.Contains(err.Error(), "llama3-8b-h100") {
		t.Errorf("unknown preset error should list the presets, got %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	fixed := mustPreset(t, "ideal")
	eng := mustPreset(t, "llama3-8b-h100")
	tests := []struct {
		name   string
		base   Profile
		mutate func(p *Profile)
		want   string // substring of the error; "" = valid
	}{
		// The example message of the issue, verbatim.
		{
			"negative itl",
			fixed,
			func(p *Profile) { p.ITL = -5 * time.Millisecond },
			"profile: itl: must be > 0, got -5ms",
		},
		// A zero TTFT is a legal (if odd) ground truth.
		{"zero ttft ok", fixed, func(p *Profile) { p.TTFT = 0 }, ""},
		{"negative ttft", fixed, func(p *Profile) { p.TTFT = -1 }, "profile: ttft: must be >= 0, got -1ns"},
		{
			"unknown mode",
			fixed,
			func(p *Profile) { p.Mode = "turbo" },
			`profile: mode: must be "fixed", "engine" or "load_curve", got "turbo"`,
		},
		{
			"unknown jitter",
			fixed,
			func(p *Profile) { p.Jitter = Jitter{Dist: "cauchy", CV: 0.1} },
			`profile: jitter.dist:`,
		},
		// Normal is clamped at zero, so large CVs would bias the mean.
		{
			"normal cv too big",
			fixed,
			func(p *Profile) { p.Jitter = Jitter{Dist: JitterNormal, CV: 0.6} },
			"profile: jitter.cv: must be <= 0.5 for normal, got 0.6",
		},
		// U(1-√3cv, 1+√3cv) must stay non-negative.
		{
			"uniform cv too big",
			fixed,
			func(p *Profile) { p.Jitter = Jitter{Dist: JitterUniform, CV: 0.6} },
			"profile: jitter.cv: must be <= 0.577",
		},
		{"lognormal any cv", fixed, func(p *Profile) { p.Jitter = Jitter{Dist: JitterLognormal, CV: 2} }, ""},
		{
			"negative cv",
			fixed,
			func(p *Profile) { p.Jitter = Jitter{Dist: JitterLognormal, CV: -1} },
			"profile: jitter.cv: must be >= 0",
		},
		// Engine fields are ignored in fixed mode, so flags may leave them at zero.
		{"fixed ignores engine fields", fixed, func(p *Profile) { p.MaxNumSeqs = -3 }, ""},
		{"zero beta0", eng, func(p *Profile) { p.Beta0US = 0 }, "profile: beta0_us: must be > 0"},
		{
			"nan beta1",
			eng,
			func(p *Profile) { p.Beta1US = math.NaN() },
			"profile: beta1_us: must be >= 0 and finite, got NaN",
		},
		{"inf beta2", eng, func(p *Profile) { p.Beta2US = math.Inf(1) }, "profile: beta2_us:"},
		{"negative beta3", eng, func(p *Profile) { p.Beta3US = -1 }, "profile: beta3_us:"},
		{"zero seqs", eng, func(p *Profile) { p.MaxNumSeqs = 0 }, "profile: max_num_seqs: must be >= 1, got 0"},
		// vLLM refuses a budget smaller than the batch: decodes would starve.
		{
			"budget below seqs",
			eng,
			func(p *Profile) { p.MaxNumBatchedTokens = 100 },
			"profile: max_num_batched_tokens: must be >= max_num_seqs",
		},
		{"zero block size", eng, func(p *Profile) { p.BlockSize = 0 }, "profile: block_size: must be >= 1, got 0"},
		{
			"zero kv blocks",
			eng,
			func(p *Profile) { p.KVCacheBlocks = 0 },
			"profile: kv_cache_blocks: must be >= 1, got 0",
		},
		// A model length the KV cache cannot hold would deadlock admission.
		{
			"model len over cache",
			eng,
			func(p *Profile) { p.KVCacheBlocks = 10 },
			"profile: max_model_len: must be > 0 and fit the KV cache",
		},
		{"negative waiting", eng, func(p *Profile) { p.MaxWaiting = -1 }, "profile: max_waiting: must be >= 0"},
		{
			"negative cold start",
			eng,
			func(p *Profile) { p.ColdStart = -time.Second },
			"profile: cold_start: must be >= 0, got -1s",
		},
		{"negative idle", fixed, func(p *Profile) { p.IdleTimeout = -time.Second }, "profile: idle_timeout:"},
		{"negative startup", fixed, func(p *Profile) { p.StartupDelay = -time.Second }, "profile: startup_delay:"},
		// A load curve needs at least one level.
		{"load curve without levels", curveProfile(), func(p *Profile) { p.LoadCurve.Levels = nil },
			"profile: load_curve.levels: must list in-flight levels in increasing order with non-decreasing, " +
				"non-negative quantiles, got no levels"},
		// Levels are keyed by a count that must grow.
		{"levels out of order", curveProfile(), func(p *Profile) { p.LoadCurve.Levels[1].InFlight = 1 },
			"level 1: in_flight 1 must be >= 1 and above the level before (1)"},
		// A distribution whose quantiles fall is no distribution.
		{"falling quantiles", curveProfile(), func(p *Profile) { p.LoadCurve.Levels[0].ITL.P90 = time.Millisecond },
			"level 0 (in_flight 1): itl quantiles must not decrease: p90 1ms < p75"},
		{"negative ttft quantile", curveProfile(), func(p *Profile) { p.LoadCurve.Levels[0].TTFT.P1 = -1 },
			"ttft p1 -1ns must be >= 0"},
		{"nan prompt slope", curveProfile(), func(p *Profile) { p.LoadCurve.TTFTPerPromptTokenUS = math.NaN() },
			"profile: load_curve.ttft_per_prompt_token_us: must be finite"},
		// load_curve mode needs no fixed TTFT or ITL.
		{"load curve ignores itl", curveProfile(), func(p *Profile) { p.ITL = 0 }, ""},
		{"validity reversed", fixed, func(p *Profile) { p.Validity = Validity{MinInFlight: 8, MaxInFlight: 2} },
			"profile: validity: bounds must be >= 0 with min <= max"},
		{"validity open above", fixed, func(p *Profile) { p.Validity = Validity{MinPromptTokens: 100} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.base
			tt.mutate(&p)
			err := p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	t.Parallel()
	p := mustPreset(t, "llama3-8b-a100")
	p.MaxNumSeqs, p.BlockSize = 0, 0
	err := p.Validate()
	for _, f := range []string{"max_num_seqs", "block_size"} {
		if err == nil || !strings.Contains(err.Error(), "profile: "+f+":") {
			t.Errorf("error %v does not name %s", err, f)
		}
	}
}

func TestProfileYAMLRoundTrip(t *testing.T) {
	t.Parallel()
	for _, name := range PresetNames() {
		p := mustPreset(t, name)
		if name == "ideal" {
			p.Jitter = Jitter{Dist: JitterLognormal, CV: 0.25}
			p.ColdStart = 1500 * time.Millisecond
			p.Validity = Validity{MinInFlight: 1, MaxInFlight: 8, MinPromptTokens: 10, MaxPromptTokens: 900}
		}
		data, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := LoadProfile(path)
		if err != nil {
			t.Fatalf("LoadProfile(%s):\n%s\n%v", name, data, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", name, got, p)
		}
	}
}

func TestParseProfile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string
		check func(p Profile) bool
		err   string
	}{
		// Durations are Go duration strings.
		{"durations", "mode: fixed\nttft: 250ms\nitl: 1.5ms\n", func(p Profile) bool {
			return p.TTFT == 250*time.Millisecond && p.ITL == 1500*time.Microsecond
		}, ""},
		// A base preset is overridden field by field.
		{"base override", "base: llama3-8b-h100\nname: h100-small\nmax_num_seqs: 8\n", func(p Profile) bool {
			return p.Name == "h100-small" && p.MaxNumSeqs == 8 && p.Beta0US == 5753 && p.KVCacheBlocks == 28672
		}, ""},
		// Typos must not be ignored silently.
		{"unknown field", "mode: fixed\nttft: 1s\nitl: 1s\nmax_num_seq: 3\n", nil, "field max_num_seq not found"},
		// A bare integer is ambiguous as a duration, so it is rejected.
		{"integer duration", "mode: fixed\nttft: 100\nitl: 1s\n", nil, "cannot unmarshal"},
		{"bad base", "base: nope\n", nil, "profile: base:"},
		// A fraction where an integer belongs is an error, not a truncation.
		{
			"fractional int",
			"base: ideal\nmax_model_len: 1000.5\n",
			nil,
			"profile: max_model_len: must be an integer, got 1000.5",
		},
		// Parsed profiles are validated.
		{"invalid", "mode: fixed\nttft: 1s\nitl: -5ms\n", nil, "profile: itl: must be > 0, got -5ms"},
		{"empty", "", nil, "profile: mode:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParseProfile([]byte(tt.yaml))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseProfile error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(p) {
				t.Errorf("ParseProfile = %+v", p)
			}
		})
	}
}

func TestLoadProfileMissing(t *testing.T) {
	t.Parallel()
	_, err := LoadProfile(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadProfile(missing) = %v, want ErrNotExist", err)
	}
}

// FuzzParseProfile checks that parsing never panics and that whatever it
// accepts is valid and survives a marshal/parse round trip unchanged.
func FuzzParseProfile(f *testing.F) {
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		data, _ := yaml.Marshal(p)
		f.Add(data)
	}
	f.Add([]byte("base: llama3-8b-a100\nmax_waiting: 10\n"))
	f.Add([]byte("mode: fixed\nttft: 1s\nitl: 20ms\njitter: {dist: uniform, cv: 0.2}\n"))
	f.Add([]byte("mode: engine\nbeta0_us: .nan\n"))
	curve, _ := yaml.Marshal(curveProfile())
	f.Add(curve)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid profile: %v", err)
		}
		out, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseProfile(out)
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", out, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, q)
		}
	})
}

func TestProfileSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
		check      func(p Profile) bool
		err        string
	}{
		// Durations as Go duration strings.
		{"ttft", "250ms", func(p Profile) bool { return p.TTFT == 250*time.Millisecond }, ""},
		// Integers and floats.
		{"max_num_seqs", "8", func(p Profile) bool { return p.MaxNumSeqs == 8 }, ""},
		{"beta1_us", "1.5", func(p Profile) bool { return p.Beta1US == 1.5 }, ""},
		// Nested fields keep their siblings.
		{"jitter.cv", "0.3", func(p Profile) bool { return p.Jitter.CV == 0.3 && p.Jitter.Dist == JitterNormal }, ""},
		// A value that only looks like YAML structure stays a scalar.
		{"name", "a: b", func(p Profile) bool { return p.Name == "a: b" }, ""},
		{"max_num_sequences", "8", nil, "field max_num_sequences not found"},
		{"itl", "fast", nil, `profile: itl="fast"`},
		// yaml.v3 alone would truncate this to 1.
		{"max_num_seqs", "1.5", nil, "profile: max_num_seqs: must be an integer, got 1.5"},
	}
	for _, tt := range tests {
		p := mustPreset(t, "llama3-8b-h100")
		p.Jitter = Jitter{Dist: JitterNormal, CV: 0.1}
		before := p
		err := p.Set(tt.key, tt.value)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Set(%s, %s) = %v, want %q", tt.key, tt.value, err, tt.err)
			}
			if !reflect.DeepEqual(p, before) {
				t.Errorf("failed Set(%s) changed the profile", tt.key)
			}
			continue
		}
		if err != nil || !tt.check(p) {
			t.Errorf("Set(%s, %s) = %v, profile %+v", tt.key, tt.value, err, p)
		}
	}
}
