package docker

import (
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// MockOption configures StartMock.
type MockOption interface{ applyMock(*mockConfig) }

// ServerOption configures StartVLLM and StartTGI.
type ServerOption interface{ applyServer(*serverConfig) }

// Option configures any container this package starts: it is both a
// MockOption and a ServerOption.
type Option func(*common)

func (o Option) applyMock(c *mockConfig)     { o(&c.common) }
func (o Option) applyServer(c *serverConfig) { o(&c.common) }

// common is what every container of this package is configured by.
type common struct {
	image          string
	args           []string
	env            map[string]string
	network        *testcontainers.DockerNetwork
	aliases        []string
	startupTimeout time.Duration
	customizers    []testcontainers.ContainerCustomizer
}

// WithImage runs the container from ref instead of the default image (for
// the mock: the image BuildImage builds with zero options).
func WithImage(ref string) Option {
	return func(c *common) { c.image = ref }
}

// WithArgs appends arguments to the server's command line: `testbed mock`
// flags for the mock (e.g. "--ttft", "50ms"), engine flags for vLLM / TGI.
func WithArgs(args ...string) Option {
	return func(c *common) { c.args = append(c.args, args...) }
}

// WithEnv sets an environment variable in the container.
func WithEnv(key, value string) Option {
	return func(c *common) {
		if c.env == nil {
			c.env = map[string]string{}
		}
		c.env[key] = value
	}
}

// WithNetwork attaches the container to nw, reachable from other containers
// on it by each alias (e.g. "mock", so a harness container can use
// http://mock:8000). The caller owns nw and removes it.
func WithNetwork(nw *testcontainers.DockerNetwork, aliases ...string) Option {
	return func(c *common) {
		c.network = nw
		c.aliases = append([]string(nil), aliases...)
	}
}

// WithStartupTimeout bounds the wait for the server to become ready. The
// defaults: 60 s for the mock, 30 min for vLLM / TGI (model download, weight
// loading, CUDA graph capture).
func WithStartupTimeout(d time.Duration) Option {
	return func(c *common) { c.startupTimeout = d }
}

// WithCustomizers passes testcontainers options through, applied after this
// package's own, for what no option here covers (mounts, log consumers).
func WithCustomizers(cs ...testcontainers.ContainerCustomizer) Option {
	return func(c *common) { c.customizers = append(c.customizers, cs...) }
}

// containerOptions turns the common configuration into testcontainers options.
func (c *common) containerOptions() []testcontainers.ContainerCustomizer {
	var opts []testcontainers.ContainerCustomizer
	if len(c.env) > 0 {
		opts = append(opts, testcontainers.WithEnv(c.env))
	}
	if c.network != nil {
		opts = append(opts, network.WithNetwork(c.aliases, c.network))
	}
	return append(opts, c.customizers...)
}
