package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Default images of the real servers, pinned so results compare over time
// ("latest" moves); docker/README.md says why these versions. WithImage
// picks another.
const (
	DefaultVLLMImage = "vllm/vllm-openai:v0.20.0"
	DefaultTGIImage  = "ghcr.io/huggingface/text-generation-inference:3.3.4"
)

// DefaultServerStartupTimeout bounds the wait for vLLM / TGI to serve: a
// first start downloads the weights, then loads them and captures CUDA
// graphs, which for an 8B model on a fresh host takes many minutes.
const DefaultServerStartupTimeout = 30 * time.Minute

type serverConfig struct {
	common
	gpus       []string
	hfToken    string
	hfCache    string
	hfCacheSet bool
	shmSize    int64
}

type serverOption func(*serverConfig)

func (o serverOption) applyServer(c *serverConfig) { o(c) }

// WithGPUs gives the server the GPUs with these device ids (indexes or
// UUIDs, as nvidia-smi -L shows them). Default: all GPUs of the host.
func WithGPUs(ids ...string) ServerOption {
	return serverOption(func(c *serverConfig) { c.gpus = append([]string(nil), ids...) })
}

// WithHFToken sets the Hugging Face token gated models (Llama) need.
// Default: $HF_TOKEN of this process; none when that is empty.
func WithHFToken(token string) ServerOption {
	return serverOption(func(c *serverConfig) { c.hfToken = token })
}

// WithHFCache mounts host directory dir as the server's Hugging Face cache,
// so weights are downloaded once per host. Default: $HF_HOME, else
// ~/.cache/huggingface (created if missing); "" mounts nothing.
func WithHFCache(dir string) ServerOption {
	return serverOption(func(c *serverConfig) { c.hfCache, c.hfCacheSet = dir, true })
}

// WithShmSize sets /dev/shm of a TGI container (default 1 GiB, as TGI
// asks). vLLM shares the host's IPC namespace instead, as vLLM asks.
func WithShmSize(bytes int64) ServerOption {
	return serverOption(func(c *serverConfig) { c.shmSize = bytes })
}

// Server is a running vLLM or TGI container.
type Server struct {
	// Container is the container, set even when the start fails after
	// creating it: hand it to testcontainers.CleanupContainer first.
	Container *testcontainers.DockerContainer
	// URL is the server's base URL from this host, without /v1.
	URL string
	// Model is the model the server serves (its name in API requests).
	Model string
}

// engine describes how one server image is started and probed.
type engine struct {
	name      string
	image     string
	port      string
	args      func(model string) []string
	cacheDir  string   // the Hugging Face cache inside the image
	ipcHost   bool     // share the host IPC namespace instead of sizing /dev/shm
	readiness []string // HTTP paths that must all answer 200
}

var (
	vllmEngine = engine{
		name:  "vLLM",
		image: DefaultVLLMImage,
		port:  "8000/tcp",
		args: func(model string) []string {
			// The image's entrypoint is `vllm serve`, which takes the model
			// as its positional argument (--model is deprecated there).
			return []string{model, "--host", "0.0.0.0", "--port", "8000"}
		},
		cacheDir: "/root/.cache/huggingface",
		ipcHost:  true,
		// /health answers once the engine is up; /v1/models once the API
		// server routes requests.
		readiness: []string{"/health", "/v1/models"},
	}
	tgiEngine = engine{
		name:  "TGI",
		image: DefaultTGIImage,
		port:  "80/tcp",
		args: func(model string) []string {
			return []string{"--model-id", model, "--hostname", "0.0.0.0", "--port", "80"}
		},
		cacheDir:  "/data",
		readiness: []string{"/health", "/info"},
	}
)

// StartVLLM starts vllm/vllm-openai serving model (a Hugging Face id) on
// the host's GPUs, and waits until it serves (up to
// DefaultServerStartupTimeout unless WithStartupTimeout). Extra WithArgs go
// to the server (e.g. "--max-num-seqs", "256"). The image must be present
// locally: a multi-gigabyte pull is the user's explicit step, not a side
// effect of a test.
func StartVLLM(ctx context.Context, model string, opts ...ServerOption) (*Server, error) {
	return startServer(ctx, vllmEngine, model, opts)
}

// StartTGI starts text-generation-inference serving model on the host's
// GPUs and waits until it serves, as StartVLLM does for vLLM.
func StartTGI(ctx context.Context, model string, opts ...ServerOption) (*Server, error) {
	return startServer(ctx, tgiEngine, model, opts)
}

func startServer(ctx context.Context, e engine, model string, opts []ServerOption) (*Server, error) {
	s := &Server{Model: model}
	if model == "" {
		return s, fmt.Errorf("start %s: model is empty: name a Hugging Face model id", e.name)
	}
	cfg, err := e.config(opts)
	if err != nil {
		return s, err
	}
	fixPublishedHost(ctx)
	present, err := ImagePresent(ctx, cfg.image)
	if err != nil {
		return s, fmt.Errorf("start %s: %w", e.name, err)
	}
	if !present {
		return s, fmt.Errorf(
			"start %s: image %s is not present locally: run `docker pull %s` first",
			e.name,
			cfg.image,
			cfg.image,
		)
	}
	c, err := testcontainers.Run(ctx, cfg.image, e.containerOptions(cfg, model)...)
	s.Container = c
	if err != nil {
		return s, fmt.Errorf("start %s (%s, model %s): %w%s", e.name, cfg.image, model, err, logTail(ctx, c))
	}
	if s.URL, err = c.PortEndpoint(ctx, e.port, "http"); err != nil {
		return s, fmt.Errorf("start %s: mapped port: %w", e.name, err)
	}
	return s, nil
}

// config applies opts over the engine's defaults.
func (e engine) config(opts []ServerOption) (serverConfig, error) {
	cfg := serverConfig{
		common:  common{image: e.image, startupTimeout: DefaultServerStartupTimeout},
		hfToken: os.Getenv("HF_TOKEN"),
		shmSize: 1 << 30,
	}
	for _, o := range opts {
		o.applyServer(&cfg)
	}
	if !cfg.hfCacheSet {
		dir, err := defaultHFCache()
		if err != nil {
			return cfg, fmt.Errorf("start %s: Hugging Face cache: %w", e.name, err)
		}
		cfg.hfCache = dir
	}
	if cfg.hfCache != "" {
		abs, err := filepath.Abs(cfg.hfCache)
		if err != nil {
			return cfg, fmt.Errorf("start %s: Hugging Face cache %q: %w", e.name, cfg.hfCache, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return cfg, fmt.Errorf("start %s: Hugging Face cache: %w", e.name, err)
		}
		cfg.hfCache = abs
	}
	return cfg, nil
}

func defaultHFCache() (string, error) {
	if dir := os.Getenv("HF_HOME"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errors.New("no $HF_HOME and no home directory: use WithHFCache")
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// containerOptions is the testcontainers request for the engine: the
// command line, GPUs, cache mount, token and the readiness wait.
func (e engine) containerOptions(cfg serverConfig, model string) []testcontainers.ContainerCustomizer {
	var waits []wait.Strategy
	for _, path := range e.readiness {
		waits = append(waits, wait.ForHTTP(path).WithPort(e.port).
			WithStartupTimeout(cfg.startupTimeout).WithPollInterval(2*time.Second))
	}
	env := map[string]string{}
	if cfg.hfToken != "" {
		// Newer images read HF_TOKEN, older ones HUGGING_FACE_HUB_TOKEN.
		env["HF_TOKEN"] = cfg.hfToken
		env["HUGGING_FACE_HUB_TOKEN"] = cfg.hfToken
	}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(append(e.args(model), cfg.args...)...),
		testcontainers.WithExposedPorts(e.port),
		testcontainers.WithEnv(env),
		testcontainers.WithHostConfigModifier(e.hostConfig(cfg)),
		testcontainers.WithWaitStrategyAndDeadline(cfg.startupTimeout, waits...),
	}
	return append(opts, cfg.containerOptions()...)
}

// hostConfig requests the GPUs (what `docker run --gpus` does) and mounts
// the cache.
func (e engine) hostConfig(cfg serverConfig) func(*container.HostConfig) {
	return func(hc *container.HostConfig) {
		hc.DeviceRequests = append(hc.DeviceRequests, gpuRequest(cfg.gpus))
		if cfg.hfCache != "" {
			hc.Binds = append(hc.Binds, cfg.hfCache+":"+e.cacheDir)
		}
		if e.ipcHost {
			hc.IpcMode = container.IPCModeHost
		} else {
			hc.ShmSize = cfg.shmSize
		}
	}
}

// gpuRequest is the device request of `--gpus all` or `--gpus device=ids`.
func gpuRequest(ids []string) container.DeviceRequest {
	r := container.DeviceRequest{Driver: "nvidia", Capabilities: [][]string{{"gpu"}}}
	if len(ids) == 0 {
		r.Count = -1
	} else {
		r.DeviceIDs = append([]string(nil), ids...)
	}
	return r
}
