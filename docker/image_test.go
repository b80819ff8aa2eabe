package docker_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/llm-testbed/testbed/docker"
)

// TestImage checks the image the way docker/Dockerfile promises it: a
// scratch image whose entrypoint is the static testbed binary, run by a
// non-root numeric user, serving the mock on 8000 by default.
func TestImage(t *testing.T) {
	t.Parallel()
	ref := testImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	cfg := img.Config
	checks := []struct {
		what, got, want string
	}{
		// the binary is the whole interface of the image
		{"entrypoint", strings.Join(cfg.Entrypoint, " "), "/usr/local/bin/testbed"},
		// `docker run testbed:latest` serves the mock on every interface
		{"cmd", strings.Join(cfg.Cmd, " "), "mock --addr 0.0.0.0:8000"},
		// numeric, non-root: scratch has no passwd to resolve names
		{"user", cfg.User, "65532:65532"},
		// results land in the working directory unless -o says otherwise
		{"workdir", cfg.WorkingDir, "/results"},
		// BuildImage links a fixed version so the content hash is stable
		{"version label", cfg.Labels["org.opencontainers.image.version"], "test"},
		{"title label", cfg.Labels["org.opencontainers.image.title"], "testbed"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("image %s: %s = %q, want %q", ref, c.what, c.got, c.want)
		}
	}
	if _, ok := cfg.ExposedPorts["8000/tcp"]; !ok {
		t.Errorf("image %s exposes %v, want 8000/tcp", ref, cfg.ExposedPorts)
	}
	if len(img.RootFS.Layers) > 6 {
		t.Errorf("image %s has %d layers; a scratch image around one binary needs 4", ref, len(img.RootFS.Layers))
	}

	// The binary runs in the image and reports the linked version.
	c, err := testcontainers.Run(ctx, ref,
		testcontainers.WithCmd("version"),
		testcontainers.WithWaitStrategy(wait.ForExit().WithExitTimeout(time.Minute)))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("run %s version: %v", ref, err)
	}
	rc, err := c.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "testbed test" {
		t.Errorf("testbed version in the image printed %q, want %q", got, "testbed test")
	}
}

// TestBuildImageCached: asking for the same image again returns the same
// content-addressed reference without a second build.
func TestBuildImageCached(t *testing.T) {
	t.Parallel()
	first := testImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	second, err := docker.BuildImage(ctx, docker.ImageOptions{Log: &log, KeepStale: true})
	if err != nil {
		t.Fatal(err)
	}
	if second != first {
		t.Errorf("same sources built %s then %s; want one content tag", first, second)
	}
	if !strings.HasPrefix(first, docker.DefaultRepo+":ctx-") {
		t.Errorf("BuildImage returned %q, want %s:ctx-<hash>", first, docker.DefaultRepo)
	}
	// A second process (fresh in-process cache) would find the image by tag;
	// this process already knows it, so no build log at all is written.
	if strings.Contains(log.String(), "Step 1/") {
		t.Errorf("second BuildImage rebuilt the image:\n%s", log.String())
	}
}
