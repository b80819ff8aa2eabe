package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

// bench stores the client's samples beside the records: client.jsonl holds
// samples and one verdict per step, and summary.json carries the verdict.
func TestBenchWritesClientSamples(t *testing.T) {
	url, cancel, done, _ := startMock(t, "--ttft", "5ms", "--itl", "2ms")
	defer func() { cancel(); <-done }()
	dir := filepath.Join(t.TempDir(), "res")
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--url", url, "--model", mockllm.DefaultModel, "--concurrency", "1,2", "--requests", "4",
		"--input-tokens", "fixed:8", "--output-tokens", "fixed:8", "--ignore-eos", "-o", dir}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	f, err := os.Open(filepath.Join(dir, results.ClientFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("client.jsonl line %q: %v", sc.Text(), err)
		}
		kinds[rec.Kind]++
	}
	if kinds["step"] != 2 || kinds["sample"] < 4 { // each step's begin and end, and Stop's
		t.Errorf("client.jsonl records by kind: %v; want 2 step verdicts and samples", kinds)
	}
	b, err := os.ReadFile(filepath.Join(dir, results.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var sum map[string][]map[string]any
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	for _, s := range sum["steps"] {
		if _, ok := s["client_bound"]; !ok {
			t.Errorf("summary step without client_bound: %v", s)
		}
		if s["client_bound"] == true && s["client_bound_reason"] == "" {
			t.Errorf("client-bound step without a reason: %v", s)
		}
	}
}

// calibrate against a `testbed mock` reached by --url: the one sentence,
// the table and calibration.json.
func TestCalibrateCommand(t *testing.T) {
	url, cancel, done, _ := startMock(t, "--ttft", "5ms", "--itl", "2ms")
	defer func() { cancel(); <-done }()
	dir := filepath.Join(t.TempDir(), "cal")
	var stdout, stderr bytes.Buffer
	// Limits out of reach: a busy test machine decides nothing here.
	args := []string{"calibrate", "--url", url + "/v1", "--concurrency", "1,4", "--no-rate", "--duration", "300ms",
		"--output-tokens", "6", "--max-error", "1h", "--max-lag", "1h", "--cpu-limit", "1", "-o", dir}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"this machine can drive up to 4 streams", "c=1", "c=4", "another process"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "calibration.json")); err != nil {
		t.Error(err)
	}
	// Bad flags are usage errors.
	if err := run(context.Background(), []string{"calibrate", "--concurrency", "0"}, &stdout, &stderr); err == nil {
		t.Error("calibrate accepted concurrency 0")
	}
}

// fit reads a run against the engine-mode mock and writes a profile that
// `testbed mock --profile FILE` serves.
func TestFitCommand(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "truth.yaml")
	if err := os.WriteFile(prof, []byte("mode: engine\nbeta0_us: 10000\nbeta1_us: 50\nbeta2_us: 1000\nmax_num_seqs: "+
		"4\nmax_num_batched_tokens: 65536\nblock_size: 16\nkv_cache_blocks: 4096\nmax_model_len: 32768\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, cancel, done, _ := startMock(t, "--profile", prof)
	defer func() { cancel(); <-done }()

	runDir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	args := []string{
		"bench",
		"--url",
		url,
		"--model",
		mockllm.DefaultModel,
		"--concurrency",
		"1,3,6",
		"--requests",
		"9",
		"--input-tokens",
		"uniform:50,400",
		"--output-tokens",
		"uniform:6,12",
		"--ignore-eos",
		"-o",
		runDir,
	}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	out := filepath.Join(t.TempDir(), "fitted.yaml")
	stdout.Reset()
	if err := run(context.Background(), []string{"fit", runDir, "-o", out, "--name", "fitted"}, &stdout, &stderr); err != nil {
		t.Fatalf("fit: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"β0 =", "R²", "wrote " + out} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("fit output lacks %q:\n%s", want, stdout.String())
		}
	}
	p, err := engine.LoadProfile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "fitted" || p.Beta0US <= 0 {
		t.Errorf("fitted profile %+v", p)
	}
	// The mock serves the fitted profile.
	url2, cancel2, done2, _ := startMock(t, "--profile", out)
	cancel2()
	if err := <-done2; err != nil || url2 == "" {
		t.Errorf("mock --profile %s: %v", out, err)
	}

	// --mode load_curve forces the load curve, which the mock serves too;
	// the output says how each mode scored.
	curve := filepath.Join(t.TempDir(), "curve.yaml")
	stdout.Reset()
	if err := run(context.Background(), []string{"fit", runDir, "-o", curve, "--mode", "load_curve"}, &stdout,
		&stderr); err != nil {
		t.Fatalf("fit --mode load_curve: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"load curve:", "choice:", "mode load_curve", "valid for"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("fit --mode load_curve output lacks %q:\n%s", want, stdout.String())
		}
	}
	if p, err := engine.LoadProfile(curve); err != nil || p.Mode != engine.ModeLoadCurve || !p.Validity.Stated() {
		t.Errorf("load-curve profile %+v: %v", p, err)
	}
	url3, cancel3, done3, _ := startMock(t, "--profile", curve)
	cancel3()
	if err := <-done3; err != nil || url3 == "" {
		t.Errorf("mock --profile %s: %v", curve, err)
	}

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"fit"}, "usage"},                                          // the directory is required
		{"bad mode", []string{"fit", runDir, "--mode", "turbo", "-o", out}, "turbo"},  // the error names the value
		{"no records", []string{"fit", t.TempDir()}, "requests.jsonl"},                // an empty directory
		{"unknown base", []string{"fit", runDir, "--base", "h200"}, "unknown preset"}, // names the preset lookup
	}
	for _, tc := range cases {
		if err := run(context.Background(), tc.args, &stdout, &stderr); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
