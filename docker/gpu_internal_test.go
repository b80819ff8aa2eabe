package docker

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
)

// TestServerRequest checks the container request StartVLLM and StartTGI
// send, without a GPU: GPUs requested as `--gpus` would, the model on the
// command line, the cache mounted, the token passed, shared memory sized.
func TestServerRequest(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	tests := []struct {
		name     string
		engine   engine
		opts     []ServerOption
		wantCmd  []string
		wantPort string
		wantGPU  container.DeviceRequest
		wantBind string
		ipcHost  bool
		wantShm  int64
	}{
		// vLLM on all GPUs, host IPC as vLLM asks, extra engine flags last
		{"vllm all gpus", vllmEngine,
			[]ServerOption{WithHFCache(cache), WithHFToken("tok"), WithArgs("--max-num-seqs", "64")},
			[]string{"m/x", "--host", "0.0.0.0", "--port", "8000", "--max-num-seqs", "64"}, "8000/tcp",
			container.DeviceRequest{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}},
			cache + ":/root/.cache/huggingface", true, 0},
		// TGI on chosen GPUs, /data as its cache, 1 GiB /dev/shm by default
		{"tgi two gpus", tgiEngine,
			[]ServerOption{WithHFCache(cache), WithHFToken("tok"), WithGPUs("0", "1")},
			[]string{"--model-id", "m/x", "--hostname", "0.0.0.0", "--port", "80"}, "80/tcp",
			container.DeviceRequest{Driver: "nvidia", DeviceIDs: []string{"0", "1"}, Capabilities: [][]string{{"gpu"}}},
			cache + ":/data", false, 1 << 30},
		// WithShmSize overrides TGI's /dev/shm
		{"tgi shm", tgiEngine,
			[]ServerOption{WithHFCache(cache), WithHFToken("tok"), WithShmSize(4 << 30)},
			[]string{"--model-id", "m/x", "--hostname", "0.0.0.0", "--port", "80"}, "80/tcp",
			container.DeviceRequest{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}},
			cache + ":/data", false, 4 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tt.engine.config(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.startupTimeout != DefaultServerStartupTimeout {
				t.Errorf("startup timeout %v, want %v", cfg.startupTimeout, DefaultServerStartupTimeout)
			}
			var req testcontainers.GenericContainerRequest
			for _, o := range tt.engine.containerOptions(cfg, "m/x") {
				if err := o.Customize(&req); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(req.Cmd, tt.wantCmd) {
				t.Errorf("cmd %q, want %q", req.Cmd, tt.wantCmd)
			}
			if !slices.Equal(req.ExposedPorts, []string{tt.wantPort}) {
				t.Errorf("exposed %q, want %q", req.ExposedPorts, tt.wantPort)
			}
			if req.Env["HF_TOKEN"] != "tok" || req.Env["HUGGING_FACE_HUB_TOKEN"] != "tok" {
				t.Errorf("env %v, want the token under both names", req.Env)
			}
			if req.WaitingFor == nil {
				t.Error("no wait strategy: the caller would get a server that does not serve yet")
			}
			var hc container.HostConfig
			req.HostConfigModifier(&hc)
			if len(hc.DeviceRequests) != 1 {
				t.Fatalf("device requests %+v, want one", hc.DeviceRequests)
			}
			got := hc.DeviceRequests[0]
			if got.Driver != tt.wantGPU.Driver || got.Count != tt.wantGPU.Count ||
				!slices.Equal(
					got.DeviceIDs,
					tt.wantGPU.DeviceIDs,
				) || !slices.Equal(got.Capabilities[0], tt.wantGPU.Capabilities[0]) {
				t.Errorf("device request %+v, want %+v", got, tt.wantGPU)
			}
			if !slices.Equal(hc.Binds, []string{tt.wantBind}) {
				t.Errorf("binds %q, want %q", hc.Binds, tt.wantBind)
			}
			if hc.IpcMode.IsHost() != tt.ipcHost || hc.ShmSize != tt.wantShm {
				t.Errorf("ipc %q shm %d, want host=%v shm %d", hc.IpcMode, hc.ShmSize, tt.ipcHost, tt.wantShm)
			}
		})
	}
}

// TestServerConfigCache: no WithHFCache means $HF_HOME; WithHFCache("")
// means no mount at all.
func TestServerConfigCache(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	cfg, err := vllmEngine.config(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.hfCache != home {
		t.Errorf("default cache %q, want $HF_HOME %q", cfg.hfCache, home)
	}
	cfg, err = vllmEngine.config([]ServerOption{WithHFCache(""), WithStartupTimeout(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var hc container.HostConfig
	vllmEngine.hostConfig(cfg)(&hc)
	if cfg.hfCache != "" || len(hc.Binds) != 0 || cfg.startupTimeout != time.Minute {
		t.Errorf(
			"WithHFCache(\"\"): cache %q binds %q timeout %v, want no mount and 1m",
			cfg.hfCache,
			hc.Binds,
			cfg.startupTimeout,
		)
	}
}

// TestHashContext: the content tag changes with any byte, file name or the
// version, and only with them.
func TestHashContext(t *testing.T) {
	t.Parallel()
	mk := func(files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	hash := func(dir, version string) string {
		h, err := hashContext(dir, version)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := map[string]string{"Dockerfile": "FROM scratch", "testbed": "\x7fELF", "empty/.x": ""}
	ref := hash(mk(base), "test")
	tests := []struct {
		name    string
		files   map[string]string
		version string
		same    bool
	}{
		// same content in another directory: same tag
		{"same content", base, "test", true},
		// one byte of the binary differs
		{
			"binary",
			map[string]string{"Dockerfile": "FROM scratch", "testbed": "\x7fELG", "empty/.x": ""},
			"test",
			false,
		},
		// a file renamed, bytes unchanged
		{
			"renamed",
			map[string]string{"Dockerfile": "FROM scratch", "testbed2": "\x7fELF", "empty/.x": ""},
			"test",
			false,
		},
		// content moved between files ("ab"+"c" vs "a"+"bc")
		{
			"boundary",
			map[string]string{"Dockerfile": "FROM scratc", "testbed": "h\x7fELF", "empty/.x": ""},
			"test",
			false,
		},
		// another version label
		{"version", base, "v2", false},
	}
	for _, tt := range tests {
		if got := hash(mk(tt.files), tt.version) == ref; got != tt.same {
			t.Errorf("%s: same hash = %v, want %v", tt.name, got, tt.same)
		}
	}
}
