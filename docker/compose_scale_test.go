package docker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestComposeScaleUp runs compose.scale.yaml for real, as docker/README.md
// says: the mock, the coordinator, four shard replicas that take their
// index from it, and the merge; the merged directory must hold every
// request of plans/scale.yaml once, from four shards, with its report.
func TestComposeScaleUp(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed")
	}
	img := testImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const shards = 4
	out := t.TempDir()
	project := fmt.Sprintf("testbed-scale-%d", os.Getpid())
	env := append(os.Environ(),
		"TESTBED_IMAGE="+img,
		"RUN_NAME=scale",
		fmt.Sprintf("SHARDS=%d", shards),
		"TESTBED_RESULTS="+out,
		fmt.Sprintf("TESTBED_USER=%d:%d", os.Getuid(), os.Getgid()),
	)
	compose := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-p", project, "-f", "compose.scale.yaml"}, args...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	logs := func() string {
		b, _ := compose(context.WithoutCancel(ctx), "logs", "--no-color")
		return string(b)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if b, err := compose(ctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, b)
		}
	})
	if b, err := compose(ctx, "up", "-d", "--no-color", "--scale", fmt.Sprintf("shard=%d", shards)); err != nil {
		t.Fatalf("docker-compose up: %v\n%s\n%s", err, b, logs())
	}
	id, err := compose(ctx, "ps", "-q", "merge")
	if err != nil || len(strings.TrimSpace(string(id))) == 0 {
		t.Fatalf("no merge container: %v %s\n%s", err, id, logs())
	}
	code, err := exec.CommandContext(ctx, "docker", "wait", strings.TrimSpace(string(id))).Output()
	if err != nil || strings.TrimSpace(string(code)) != "0" {
		t.Fatalf("merge exited %s (%v)\n%s", code, err, logs())
	}
	checkScaleResults(t, filepath.Join(out, "scale"), shards)
}

// checkScaleResults: the merged run holds every planned request once,
// from every shard, with the report written.
func checkScaleResults(t *testing.T, dir string, shards int) {
	t.Helper()
	plan, err := harness.LoadPlan(filepath.Join("plans", "scale.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "merged")
	recs, err := results.ReadRecords(filepath.Join(merged, results.RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := len(plan.Steps()) * (plan.Load.Requests + plan.Load.Warmup); len(recs) != want {
		t.Errorf("%d merged records, want %d", len(recs), want)
	}
	ids := map[string]bool{}
	for _, r := range recs {
		if ids[r.ID] || !r.OK() {
			t.Errorf("request %s: duplicate %v, error %q %s", r.ID, ids[r.ID], r.ErrorClass, r.Error)
		}
		ids[r.ID] = true
	}
	var info results.RunInfo[harness.Plan]
	if err := results.ReadJSON(filepath.Join(merged, results.RunFile), &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Shards) != shards || info.Merge == nil {
		t.Fatalf("merged run.json: %d shards, merge %v; want %d", len(info.Shards), info.Merge, shards)
	}
	for _, ms := range info.Merge.Steps {
		t.Logf("step %d: shard starts %.2f ms apart", ms.Step, float64(ms.StartSpreadNS)/1e6)
	}
	for _, f := range []string{results.SummaryFile, results.HistogramsFile, results.AnalysisFile, results.ReportMarkdown} {
		if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
			t.Errorf("merged directory: %v", err)
		}
	}
}
