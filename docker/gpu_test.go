package docker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/llm-testbed/testbed/docker"
	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestGPUServers starts vLLM and TGI on this host's GPUs and runs a short
// harness plan against each. They need TESTBED_GPU=1, a GPU with the NVIDIA
// Container Toolkit, and the images already present (nothing is pulled).
func TestGPUServers(t *testing.T) {
	t.Parallel()
	model := os.Getenv("TESTBED_GPU_MODEL")
	if model == "" {
		model = "Qwen/Qwen2.5-0.5B-Instruct" // small and ungated: no token needed
	}
	tests := []struct {
		name     string
		imageEnv string
		image    string
		start    func(context.Context, string, ...docker.ServerOption) (*docker.Server, error)
		api      string
		metric   string // a metric the server's /metrics must carry
		exactOut bool   // the server honours ignore_eos, so n_out is exact
	}{
		// vLLM through the OpenAI chat API
		{
			"vLLM",
			"TESTBED_VLLM_IMAGE",
			docker.DefaultVLLMImage,
			docker.StartVLLM,
			harness.APIChat,
			"vllm:num_requests_running",
			true,
		},
		// TGI through its own /generate_stream
		{"TGI", "TESTBED_TGI_IMAGE", docker.DefaultTGIImage, docker.StartTGI, harness.APITGI, "tgi_queue_size", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if os.Getenv("TESTBED_GPU") != "1" {
				t.Skipf(
					"%s needs a GPU: set TESTBED_GPU=1 on a host with one (and the NVIDIA Container Toolkit)",
					tt.name,
				)
			}
			requireDocker(t)
			img := tt.image
			if v := os.Getenv(tt.imageEnv); v != "" {
				img = v
			}
			ctx, cancel := context.WithTimeout(
				t.Context(),
				deadline(t, docker.DefaultServerStartupTimeout+10*time.Minute),
			)
			defer cancel()
			present, err := docker.ImagePresent(ctx, img)
			if err != nil {
				t.Fatal(err)
			}
			if !present {
				t.Skipf(
					"image %s is not present and is never pulled by tests: `docker pull %s` (or set %s)",
					img,
					img,
					tt.imageEnv,
				)
			}

			s, err := tt.start(ctx, model, docker.WithImage(img))
			testcontainers.CleanupContainer(t, s.Container)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := harness.ParsePlan(fmt.Appendf(nil, `
name: gpu-smoke
seed: 1
targets: [{name: %s, url: %q, api: %s, model: %q}]
dataset: {input_tokens: "fixed:128", output_tokens: "fixed:32"}
load: {concurrency: [1, 4], requests: 8, warmup: 1}
ignore_eos: true
timeouts: {request: 2m}
`, strings.ToLower(tt.name), s.URL, tt.api, model))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			res, err := harness.Run(ctx, plan, dir)
			if err != nil {
				t.Fatalf("harness.Run against %s: %v", tt.name, err)
			}
			recs, err := results.ReadRecords(filepath.Join(dir, results.RecordsFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if !r.OK() {
					t.Errorf("request %s failed: %s %s", r.ID, r.ErrorClass, r.Error)
					continue
				}
				if r.FirstTokenNS <= r.SentNS || r.NOut < 1 || (tt.exactOut && r.NOut != 32) {
					t.Errorf(
						"request %s: first token at %d after send at %d, n_out %d",
						r.ID,
						r.FirstTokenNS,
						r.SentNS,
						r.NOut,
					)
				}
			}
			for _, st := range res.Summary.Steps {
				t.Logf(
					"%s c=%d: TTFT p50 %.1f ms, ITL p50 %.2f ms, %.0f output tokens/s",
					tt.name,
					st.Concurrency,
					st.TTFT.P50,
					st.ITL.P50,
					st.OutputTokensPerS,
				)
			}
			if body := get(t, ctx, s.URL+"/metrics"); !strings.Contains(body, tt.metric) {
				t.Errorf("%s /metrics lacks %s", tt.name, tt.metric)
			}
		})
	}
}

// deadline is want, or less when the test binary's -timeout ends sooner.
func deadline(t *testing.T, want time.Duration) time.Duration {
	if d, ok := t.Deadline(); ok {
		if left := time.Until(d) - 30*time.Second; left < want {
			return left
		}
	}
	return want
}

func get(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
