package docker

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// MockPort is the port the mock listens on inside its container.
const MockPort = "8000/tcp"

type mockConfig struct {
	common
	imageOpts ImageOptions
}

type mockOption func(*mockConfig)

func (o mockOption) applyMock(c *mockConfig) { o(c) }

// WithImageOptions builds the mock's image with opts when no WithImage is
// given (default: BuildImage's zero options).
func WithImageOptions(opts ImageOptions) MockOption {
	return mockOption(func(c *mockConfig) { c.imageOpts = opts })
}

// Mock is a running mock container.
type Mock struct {
	// Container is the container, set even when StartMock fails after
	// creating it: hand it to testcontainers.CleanupContainer (which accepts
	// nil) before checking the error.
	Container *testcontainers.DockerContainer
	// URL is the mock's base URL from this host, such as
	// http://localhost:32768, without /v1.
	URL string
}

// StartMock starts `testbed mock --addr 0.0.0.0:8000` (plus WithArgs) in a
// container, waits until GET /health answers 200, and returns the mock's URL
// through the mapped port. Without WithImage it builds the image first
// (BuildImage, shared by every caller in the process).
func StartMock(ctx context.Context, opts ...MockOption) (*Mock, error) {
	cfg := mockConfig{common: common{startupTimeout: 60 * time.Second}}
	for _, o := range opts {
		o.applyMock(&cfg)
	}
	m := &Mock{}
	fixPublishedHost(ctx)
	img := cfg.image
	if img == "" {
		var err error
		if img, err = BuildImage(ctx, cfg.imageOpts); err != nil {
			return m, fmt.Errorf("start mock: %w", err)
		}
	}
	args := append([]string{"mock", "--addr", "0.0.0.0:8000"}, cfg.args...)
	ctrOpts := append([]testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(args...),
		testcontainers.WithExposedPorts(MockPort),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/health").WithPort(MockPort).
			WithStartupTimeout(cfg.startupTimeout).WithPollInterval(50 * time.Millisecond)),
	}, cfg.containerOptions()...)

	c, err := testcontainers.Run(ctx, img, ctrOpts...)
	m.Container = c
	if err != nil {
		return m, fmt.Errorf("start mock from %s: %w%s", img, err, logTail(ctx, c))
	}
	if m.URL, err = c.PortEndpoint(ctx, MockPort, "http"); err != nil {
		return m, fmt.Errorf("start mock: mapped port: %w", err)
	}
	return m, nil
}

// logTail returns the end of a container's logs, to put in an error: a
// server that never got ready usually said why.
func logTail(ctx context.Context, c *testcontainers.DockerContainer) string {
	if c == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil && len(b) == 0 {
		return ""
	}
	return "\ncontainer log (tail):\n" + tail(string(b), 4000)
}
