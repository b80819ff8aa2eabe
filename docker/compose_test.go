package docker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// composeFile is the part of a compose file these tests check.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Resources struct {
				Reservations struct {
					Devices []struct {
						Driver       string     `yaml:"driver"`
						Capabilities []string   `yaml:"capabilities"`
						Count        any        `yaml:"count"`
						DeviceIDs    []string   `yaml:"device_ids"`
						Options      [][]string `yaml:"options"`
					} `yaml:"devices"`
				} `yaml:"reservations"`
			} `yaml:"resources"`
		} `yaml:"deploy"`
	} `yaml:"services"`
}

// interpolation matches ${VAR:-default} and ${VAR}; loadCompose resolves them ${VAR:-default} to its default and ${VAR}
// to "",
// to the default or "", which is what compose does with an empty environment.
var interpolation = regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}`)

func loadCompose(t *testing.T, name string) composeFile {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b = interpolation.ReplaceAll(b, []byte("$3"))
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// TestComposeFiles checks that each compose file wires what docker/README.md
// says: a server with a healthcheck, a harness job from the testbed image
// that waits for it, runs a plan that exists and targets that server by its
// service name, and writes to the results volume; GPUs reserved on GPU hosts.
func TestComposeFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file   string
		server string // the service under test
		plan   string // what the harness job runs by default
		gpu    bool   // server and DCGM exporter reserve NVIDIA GPUs
	}{
		// this machine: the mock image and a harness job, no GPU
		{"compose.mock.yaml", "mock", "mock.yaml", false},
		// a GPU host with vLLM
		{"compose.vllm.yaml", "vllm", "vllm.yaml", true},
		// a GPU host with TGI
		{"compose.tgi.yaml", "tgi", "tgi.yaml", true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			c := loadCompose(t, tt.file)
			server, ok := c.Services[tt.server]
			if !ok {
				t.Fatalf("no service %q", tt.server)
			}
			if server.Healthcheck == nil || len(server.Healthcheck.Test) == 0 {
				t.Errorf("service %s has no healthcheck: the harness would start before it serves", tt.server)
			}
			h, ok := c.Services["harness"]
			if !ok {
				t.Fatal("no harness service")
			}
			if h.Image != "testbed:latest" {
				t.Errorf("harness image %q, want testbed:latest (what make image builds)", h.Image)
			}
			if got := h.DependsOn[tt.server].Condition; got != "service_healthy" {
				t.Errorf("harness depends_on %s with condition %q, want service_healthy", tt.server, got)
			}
			wantCmd := []string{"run", "/plans/" + tt.plan, "-o"}
			if len(h.Command) != 4 || !slices.Equal(h.Command[:3], wantCmd) ||
				!strings.HasPrefix(h.Command[3], "/results/") {
				t.Errorf("harness command %q, want %q /results/NAME", h.Command, wantCmd)
			}
			if !slices.Contains(h.Volumes, "./plans:/plans:ro") || !slices.Contains(h.Volumes, "results:/results") {
				t.Errorf("harness volumes %q, want the plans mounted read-only and the results volume", h.Volumes)
			}

			plan, err := harness.LoadPlan(filepath.Join("plans", tt.plan))
			if err != nil {
				t.Fatal(err)
			}
			for _, target := range plan.Targets {
				u, err := url.Parse(target.URL)
				if err != nil {
					t.Fatal(err)
				}
				if u.Hostname() != tt.server {
					t.Errorf("plan %s targets host %q, want the compose service %q", tt.plan, u.Hostname(), tt.server)
				}
			}

			if !tt.gpu {
				return
			}
			for _, svc := range []string{tt.server, "dcgm-exporter"} {
				devs := c.Services[svc].Deploy.Resources.Reservations.Devices
				if len(devs) != 1 || devs[0].Driver != "nvidia" ||
					!slices.Equal(devs[0].Capabilities, []string{"gpu"}) {
					t.Errorf("service %s reserves devices %+v, want one nvidia gpu reservation", svc, devs)
				}
			}
			// The plan scrapes the engine's metrics and the DCGM exporter
			// onto the run's timeline.
			if plan.ServerMetrics == nil {
				t.Fatalf("plan %s has no server_metrics section", tt.plan)
			}
			for _, host := range []string{tt.server, "dcgm-exporter"} {
				if !slices.ContainsFunc(plan.ServerMetrics.URLs, func(s string) bool {
					u, err := url.Parse(s)
					return err == nil && u.Hostname() == host && u.Path == "/metrics"
				}) {
					t.Errorf(
						"plan %s server_metrics.urls %q, want %s's /metrics",
						tt.plan,
						plan.ServerMetrics.URLs,
						host,
					)
				}
			}
		})
	}
}

// TestComposeConfig asks docker-compose itself to validate each file (no
// image is pulled). It needs the docker-compose binary, not a daemon.
func TestComposeConfig(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed; the files are still checked by TestComposeFiles")
	}
	files, err := filepath.Glob("compose.*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no compose files: %v", err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "-f", f, "--profile", "monitoring", "config", "-q").
				CombinedOutput()
			if err != nil {
				t.Fatalf("docker-compose -f %s config: %v\n%s", f, err, out)
			}
		})
	}
}

// TestPlans: every shipped plan parses and validates as `testbed run` will
// read it.
func TestPlans(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("plans/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no plans: %v", err)
	}
	for _, f := range files {
		if _, err := harness.LoadPlan(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestComposeMockUp runs compose.mock.yaml for real, as the README says,
// with the short plans/smoke.yaml: the mock's health check must pass, the
// harness job must reach the mock by service name and write its results
// where TESTBED_RESULTS points, and exit 0.
func TestComposeMockUp(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed; TestHarnessContainerOverNetwork runs the same flow without it")
	}
	img := testImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	out := t.TempDir()
	project := fmt.Sprintf("testbed-test-%d", os.Getpid())
	env := append(os.Environ(),
		"TESTBED_IMAGE="+img,
		"PLAN=smoke.yaml",
		"RUN_NAME=smoke",
		"MOCK_PORT=0", // any free host port: 8000 may be taken
		"TESTBED_RESULTS="+out,
		fmt.Sprintf("TESTBED_USER=%d:%d", os.Getuid(), os.Getgid()),
	)
	compose := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-p", project, "-f", "compose.mock.yaml"}, args...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if b, err := compose(ctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, b)
		}
	})
	b, err := compose(ctx, "up", "--no-color", "--abort-on-container-exit", "--exit-code-from", "harness")
	if err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, b)
	}

	plan, err := harness.LoadPlan(filepath.Join("plans", "smoke.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := results.ReadRecords(filepath.Join(out, "smoke", results.RecordsFile))
	if err != nil {
		t.Fatalf("results of the compose run: %v\n%s", err, b)
	}
	if want := len(plan.Steps()) * (plan.Load.Requests + plan.Load.Warmup); len(recs) != want {
		t.Errorf("%d records, want %d", len(recs), want)
	}
	for _, r := range recs {
		if !r.OK() || r.NOut != 16 {
			t.Errorf("request %s: error %q %s, n_out %d; want ok with 16 tokens", r.ID, r.ErrorClass, r.Error, r.NOut)
		}
	}
	var sum results.Summary
	sb, err := os.ReadFile(filepath.Join(out, "smoke", results.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sb, &sum); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(sum.Steps) != len(plan.Steps()) {
		t.Errorf("summary.json has %d steps, want %d", len(sum.Steps), len(plan.Steps()))
	}
}
