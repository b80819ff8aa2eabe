package docker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"testbed/docker"
	"testbed/harness"
)

// truth is the mock's ground truth of one request (CONTRACTS.md); only the
// fields these tests check.
type truth struct {
	ID               string `json:"id"`
	Stream           bool   `json:"stream"`
	Status           int    `json:"status"`
	CompletionTokens int    `json:"completion_tokens"`
	ArrivalNS        int64  `json:"arrival_ns"`
	FirstTokenNS     int64  `json:"first_token_ns"`
	LastTokenNS      int64  `json:"last_token_ns"`
}

func (tr truth) ttft() time.Duration { return time.Duration(tr.FirstTokenNS - tr.ArrivalNS) }

// startMock starts the mock container with args and schedules its end.
func startMock(t *testing.T, ctx context.Context, opts ...docker.MockOption) *docker.Mock {
	t.Helper()
	img := testImage(t)
	m, err := docker.StartMock(ctx, append([]docker.MockOption{docker.WithImage(img)}, opts...)...)
	testcontainers.CleanupContainer(t, m.Container)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// allTruth reads every request's ground truth from the mock (JSONL).
func allTruth(t *testing.T, ctx context.Context, base string) map[string]truth {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/testbed/requests", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /testbed/requests: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /testbed/requests: %s", resp.Status)
	}
	out := map[string]truth{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var tr truth
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			t.Fatalf("ground truth line %q: %v", sc.Text(), err)
		}
		out[tr.ID] = tr
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMockContainerStreamsChat streams one chat completion from the mock
// container through the mapped port and checks it against the mock's own
// ground truth for that request.
func TestMockContainerStreamsChat(t *testing.T) {
	t.Parallel()
	const (
		ttft      = 50 * time.Millisecond
		itl       = 5 * time.Millisecond
		maxTokens = 16
	)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m := startMock(t, ctx, docker.WithArgs("--ttft", ttft.String(), "--itl", itl.String(), "--seed", "7"))

	const id = "docker-stream-1"
	body := fmt.Sprintf(`{"model":"testbed-mock","stream":true,"stream_options":{"include_usage":true},`+
		`"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hello from a container test"}]}`, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /v1/chat/completions: %s: %s", resp.Status, b)
	}
	if got := resp.Header.Get("X-Request-Id"); got != id {
		t.Errorf("x-request-id = %q, want the client's %q", got, id)
	}

	var (
		firstToken time.Time
		chunks     int
		done       bool
		usage      struct{ CompletionTokens int }
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string }
			}
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			if firstToken.IsZero() {
				firstToken = time.Now()
			}
			chunks++
		}
		if chunk.Usage != nil {
			usage.CompletionTokens = chunk.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Error("stream ended without data: [DONE]")
	}
	if chunks != maxTokens || usage.CompletionTokens != maxTokens {
		t.Errorf("got %d content chunks and usage.completion_tokens %d, want %d of each (ignore_eos)", chunks, usage.CompletionTokens, maxTokens)
	}
	if firstToken.IsZero() {
		t.Fatal("no content chunk")
	}
	clientTTFT := firstToken.Sub(sent)

	truths := allTruth(t, ctx, m.URL)
	tr, ok := truths[id]
	if !ok {
		t.Fatalf("mock has no ground truth for %s", id)
	}
	if !tr.Stream || tr.Status != http.StatusOK || tr.CompletionTokens != maxTokens {
		t.Errorf("ground truth %+v, want a streamed 200 with %d tokens", tr, maxTokens)
	}
	// Fixed mode: the server's TTFT is the configured one, late by at most
	// the mock's emission lateness, which stays far below one ITL.
	if got := tr.ttft(); got < ttft || got > ttft+itl {
		t.Errorf("server TTFT %v, want %v to %v (configured TTFT + one ITL)", got, ttft, ttft+itl)
	}
	if clientTTFT < tr.ttft() {
		t.Errorf("client TTFT %v < server TTFT %v: the client cannot see a token before it was written", clientTTFT, tr.ttft())
	}
	t.Logf("server TTFT %v, client TTFT %v through the mapped port (+%v)", tr.ttft(), clientTTFT, clientTTFT-tr.ttft())
}

// TestHarnessAgainstMockContainer runs a harness plan in-process against
// the mock container through its mapped port, and checks the results the
// way the harness's own tests check them against httptest: every request
// ok, TTFT p50 at the configured TTFT, each client TTFT at or above the
// mock's ground truth.
func TestHarnessAgainstMockContainer(t *testing.T) {
	t.Parallel()
	const (
		ttft = 100 * time.Millisecond
		itl  = 10 * time.Millisecond
		nOut = 16
		// The docker-proxy hop adds well under a millisecond per chunk;
		// this machine's load adds scheduling noise of a few ms. The
		// tolerance is a tenth of the configured TTFT: wide enough for
		// both, far too narrow for a client counting the role chunk or
		// queueing requests (those err by ≥ one TTFT).
		tol = ttft / 10
	)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m := startMock(t, ctx, docker.WithArgs("--ttft", ttft.String(), "--itl", itl.String(), "--seed", "3"))

	plan, err := harness.ParsePlan(fmt.Appendf(nil, `
name: container-mock
seed: 5
targets:
  - {name: mock, url: %q, api: chat, model: testbed-mock}
dataset: {input_tokens: "fixed:64", output_tokens: "fixed:%d"}
load: {concurrency: [1, 8], requests: 24, warmup: 2}
ignore_eos: true
timeouts: {request: 30s}
`, m.URL, nOut))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := harness.Run(ctx, plan, dir)
	if err != nil {
		t.Fatalf("harness.Run: %v", err)
	}
	recs, err := harness.ReadRecords(filepath.Join(dir, harness.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (24 + 2); len(recs) != want {
		t.Fatalf("%d records, want %d (2 steps × (24 + 2 warm-up))", len(recs), want)
	}
	truths := allTruth(t, ctx, m.URL)
	var gaps []time.Duration
	for _, r := range recs {
		if !r.OK() {
			t.Errorf("request %s failed: %s %s", r.ID, r.ErrorClass, r.Error)
			continue
		}
		if r.NOut != nOut {
			t.Errorf("request %s: n_out %d, want %d", r.ID, r.NOut, nOut)
		}
		tr, ok := truths[r.ID]
		if !ok {
			t.Errorf("request %s: the mock has no ground truth for it", r.ID)
			continue
		}
		client := time.Duration(r.FirstTokenNS - r.SentNS)
		if client < tr.ttft() {
			t.Errorf("request %s: client TTFT %v < server TTFT %v", r.ID, client, tr.ttft())
		}
		gaps = append(gaps, client-tr.ttft())
	}
	slices.Sort(gaps)
	if len(gaps) > 0 {
		t.Logf("client TTFT − server TTFT over %d requests: min %v, p50 %v, max %v", len(gaps), gaps[0], gaps[len(gaps)/2], gaps[len(gaps)-1])
	}

	if len(res.Summary.Steps) != 2 {
		t.Fatalf("summary has %d steps, want 2", len(res.Summary.Steps))
	}
	for _, s := range res.Summary.Steps {
		if s.OK != s.Requests || s.Requests != 24 {
			t.Errorf("step c=%d: %d of %d ok, want 24 of 24; errors %v", s.Concurrency, s.OK, s.Requests, s.Errors)
		}
		p50 := time.Duration(s.TTFT.P50 * float64(time.Millisecond))
		if p50 < ttft || p50 > ttft+tol {
			t.Errorf("step c=%d: TTFT p50 %v, want %v to %v", s.Concurrency, p50, ttft, ttft+tol)
		}
		itlP50 := time.Duration(s.ITL.P50 * float64(time.Millisecond))
		if d := itlP50 - itl; d < -itl/10 || d > itl/10 {
			t.Errorf("step c=%d: ITL p50 %v, want %v ± %v", s.Concurrency, itlP50, itl, itl/10)
		}
	}
}

// TestHarnessContainerOverNetwork is the two-container case: the mock on a
// user-defined network under the alias "mock", and the harness in a second
// container from the same image running the shipped plans/mock.yaml (what
// compose.mock.yaml runs) against http://mock:8000, writing its results to a
// bind-mounted directory.
func TestHarnessContainerOverNetwork(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	img := testImage(t)

	nw, err := network.New(ctx)
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	// The plan expects a fixed-mode mock; shorter times than compose's keep
	// the test quick (55 requests at concurrency 1).
	m := startMock(t, ctx, docker.WithNetwork(nw, "mock"),
		docker.WithArgs("--ttft", "20ms", "--itl", "1ms", "--seed", "1"))

	plans, err := filepath.Abs("plans")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	h, err := testcontainers.Run(ctx, img,
		testcontainers.WithCmd("run", "/plans/mock.yaml", "-o", "/results/mock"),
		network.WithNetwork(nil, nw),
		// Run as this test's user so the results are ours to read and
		// remove; the image's own user owns only the image's /results.
		testcontainers.WithConfigModifier(func(c *container.Config) {
			c.User = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
		}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.Binds = append(hc.Binds, plans+":/plans:ro", out+":/results")
		}),
		testcontainers.WithWaitStrategy(wait.ForExit().WithExitTimeout(3*time.Minute)))
	testcontainers.CleanupContainer(t, h)
	if err != nil {
		t.Fatalf("harness container: %v", err)
	}
	state, err := h.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state.ExitCode != 0 {
		t.Errorf("testbed run exited %d; log:\n%s", state.ExitCode, containerLog(t, ctx, h))
	}

	plan, err := harness.LoadPlan(filepath.Join(plans, "mock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	perStep := plan.Load.Requests + plan.Load.Warmup
	wantRecords := len(plan.Steps()) * perStep
	recs, err := harness.ReadRecords(filepath.Join(out, "mock", harness.RecordsFile))
	if err != nil {
		t.Fatalf("results of the harness container: %v", err)
	}
	if len(recs) != wantRecords {
		t.Errorf("%d records, want %d", len(recs), wantRecords)
	}
	// Every request reached this mock, over the network alias: it holds
	// the ground truth of each, under the harness's own request id.
	truths := allTruth(t, ctx, m.URL)
	for _, r := range recs {
		if !r.OK() {
			t.Errorf("request %s failed: %s %s", r.ID, r.ErrorClass, r.Error)
			continue
		}
		tr, ok := truths[r.ID]
		if !ok || tr.Status != http.StatusOK {
			t.Errorf("request %s: ground truth %+v (found %v), want a 200 seen by the mock", r.ID, tr, ok)
			continue
		}
		if client := time.Duration(r.FirstTokenNS - r.SentNS); client < tr.ttft() {
			t.Errorf("request %s: client TTFT %v < server TTFT %v", r.ID, client, tr.ttft())
		}
	}
	var sum harness.Summary
	b, err := os.ReadFile(filepath.Join(out, "mock", harness.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(sum.Steps) != len(plan.Steps()) {
		t.Errorf("summary.json has %d steps, want %d", len(sum.Steps), len(plan.Steps()))
	}
	for _, s := range sum.Steps {
		if s.Target != "mock" || s.OK != plan.Load.Requests {
			t.Errorf("step %s c=%d: %d of %d ok, want %d", s.Target, s.Concurrency, s.OK, s.Requests, plan.Load.Requests)
		}
	}
}

func containerLog(t *testing.T, ctx context.Context, c *testcontainers.DockerContainer) string {
	t.Helper()
	rc, err := c.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return string(b)
}
