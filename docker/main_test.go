package docker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/docker"
)

func TestMain(m *testing.M) {
	// Ryuk, testcontainers' reaper, is an image this engine may be unable
	// to pull; every test here ends its containers with CleanupContainer.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	os.Exit(m.Run())
}

// requireDocker skips t when no Docker daemon answers, or fails it when
// TESTBED_REQUIRE_DOCKER=1 (CI), where a silent skip would hide that the
// container tests never ran.
func requireDocker(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	err := docker.Available(ctx)
	if err == nil {
		return
	}
	if os.Getenv("TESTBED_REQUIRE_DOCKER") == "1" {
		t.Fatalf("TESTBED_REQUIRE_DOCKER=1 but no Docker daemon is reachable: %v", err)
	}
	t.Skipf(
		"no Docker daemon reachable, container test skipped (set TESTBED_REQUIRE_DOCKER=1 to make this a failure): %v",
		err,
	)
}

// testImage builds (once per test binary) the image every container test
// runs, failing t when it cannot.
func testImage(t *testing.T) string {
	t.Helper()
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ref, err := docker.BuildImage(ctx, docker.ImageOptions{})
	if err != nil {
		t.Fatalf("BuildImage: %v", err)
	}
	return ref
}
