package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// Available returns nil when a Docker daemon answers, and otherwise an error
// that says which daemon was tried and why it failed. Tests use it to skip
// (or, where Docker is required, to fail) before starting anything.
func Available(ctx context.Context) (err error) {
	// The client constructor may panic when no Docker host can be found at
	// all; that is "not available", not a crash of the caller.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker client: %v", r)
		}
	}()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	ping, err := cli.Ping(ctx, client.PingOptions{})
	if err != nil {
		return fmt.Errorf("ping docker daemon at %s: %w", cli.DaemonHost(), err)
	}
	if ping.APIVersion == "" {
		return fmt.Errorf("docker daemon at %s did not report an API version", cli.DaemonHost())
	}
	return nil
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
