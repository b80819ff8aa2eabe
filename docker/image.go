package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// DefaultRepo is the repository BuildImage tags its images in.
const DefaultRepo = "testbed"

// DefaultCACerts is the CA bundle copied into the image by default. Scratch
// has no trust store, and the harness in the image must reach HTTPS targets.
const DefaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// cacheLabel marks the images BuildImage tagged by content hash, so that
// stale ones can be told apart from images anyone else built.
const cacheLabel = "io.testbed.image.content-tag"

// contentTagPrefix starts every content-hash tag.
const contentTagPrefix = "ctx-"

// ImageOptions says how BuildImage builds the testbed image. The zero value
// builds ./cmd/testbed of the module around the working directory and tags
// the image testbed:ctx-<hash of the build context>.
type ImageOptions struct {
	// ModuleDir is the root of the testbed module (the directory holding
	// go.mod and docker/Dockerfile). Default: the nearest directory at or
	// above the working directory that has a go.mod.
	ModuleDir string
	// Repo is the image repository. Default DefaultRepo.
	Repo string
	// Tag, when set, names the image and forces a build. Default: a tag
	// derived from the content of the build context, so that every test
	// (and every test binary) asking for the same content builds it once.
	Tag string
	// Version is linked into the binary (main.version) and the image label.
	// Default "test": a fixed value, so the content hash depends on the
	// code only and not on the state of the git tree.
	Version string
	// CACerts is the CA bundle copied into the image. Default
	// DefaultCACerts; when that file is missing the image gets an empty
	// bundle and cannot verify TLS peers, which only remote targets need.
	CACerts string
	// Log receives the output of `go build` and of the image build.
	// Default: discarded (it is in the error when a step fails).
	Log io.Writer
	// KeepStale keeps older content-tagged images of Repo. By default a
	// successful build removes them (best effort; images in use stay), so
	// a test loop over changing code does not fill the disk.
	KeepStale bool
}

// imageKey is the part of ImageOptions that decides which image is built.
type imageKey struct {
	moduleDir, repo, tag, version, caCerts string
}

func (o ImageOptions) resolve() (ImageOptions, error) {
	if o.ModuleDir == "" {
		dir, err := moduleRoot()
		if err != nil {
			return o, err
		}
		o.ModuleDir = dir
	}
	abs, err := filepath.Abs(o.ModuleDir)
	if err != nil {
		return o, fmt.Errorf("ImageOptions.ModuleDir %q: %w", o.ModuleDir, err)
	}
	o.ModuleDir = abs
	if o.Repo == "" {
		o.Repo = DefaultRepo
	}
	if o.Version == "" {
		o.Version = "test"
	}
	if o.CACerts == "" {
		o.CACerts = DefaultCACerts
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

// moduleRoot walks up from the working directory to the nearest go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find module root: no go.mod at or above %s; set ImageOptions.ModuleDir", wd)
		}
	}
}

// buildCall is one BuildImage in flight or done; callers asking for the same
// image while it builds wait for it instead of building it again.
type buildCall struct {
	done chan struct{}
	ref  string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[imageKey]*buildCall{}
)

// BuildImage builds the testbed image and returns its reference
// (repo:tag). It compiles ./cmd/testbed with CGO_ENABLED=0 into a temporary
// build context beside docker/Dockerfile and the CA bundle, and asks the
// Docker daemon to build it; nothing is pulled.
//
// Concurrent and repeated calls with the same options in one process build
// once. With the default content tag, an image whose tag matches the
// context's hash is reused across processes too, so only `go build` (cached
// by Go) runs again.
func BuildImage(ctx context.Context, opts ImageOptions) (string, error) {
	opts, err := opts.resolve()
	if err != nil {
		return "", err
	}
	key := imageKey{opts.ModuleDir, opts.Repo, opts.Tag, opts.Version, opts.CACerts}

	buildsMu.Lock()
	call, running := builds[key]
	if !running {
		call = &buildCall{done: make(chan struct{})}
		builds[key] = call
	}
	buildsMu.Unlock()

	if !running {
		call.ref, call.err = buildImage(ctx, opts)
		if call.err != nil {
			// Forget failures: the next caller may have a live context or
			// fixed code, and deserves a fresh try.
			buildsMu.Lock()
			delete(builds, key)
			buildsMu.Unlock()
		}
		close(call.done)
	}
	select {
	case <-call.done:
		return call.ref, call.err
	case <-ctx.Done():
		return "", fmt.Errorf("build image: %w", ctx.Err())
	}
}

func buildImage(ctx context.Context, opts ImageOptions) (string, error) {
	dir, err := os.MkdirTemp("", "testbed-image-")
	if err != nil {
		return "", fmt.Errorf("build image: %w", err)
	}
	defer os.RemoveAll(dir)

	sum, err := assembleContext(ctx, dir, opts)
	if err != nil {
		return "", err
	}
	tag := opts.Tag
	if tag == "" {
		tag = contentTagPrefix + sum[:16]
	}
	ref := opts.Repo + ":" + tag

	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return "", fmt.Errorf("build image %s: docker client: %w", ref, err)
	}
	defer cli.Close()

	if opts.Tag == "" {
		if _, err := cli.ImageInspect(ctx, ref); err == nil {
			fmt.Fprintf(opts.Log, "image %s is up to date\n", ref)
			return ref, nil
		}
	}

	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", fmt.Errorf("build image %s: docker provider: %w", ref, err)
	}
	defer provider.Close()

	version := opts.Version
	req := &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context:        dir,
		Dockerfile:     "Dockerfile",
		Repo:           opts.Repo,
		Tag:            tag,
		BuildArgs:      map[string]*string{"VERSION": &version},
		BuildLogWriter: opts.Log,
		KeepImage:      true,
		BuildOptionsModifier: func(o *client.ImageBuildOptions) {
			if opts.Tag == "" {
				o.Labels = map[string]string{cacheLabel: "true"}
			}
		},
	}}
	if _, err := provider.BuildImage(ctx, req); err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	if opts.Tag == "" && !opts.KeepStale {
		removeStale(ctx, cli, opts.Repo, tag, opts.Log)
	}
	return ref, nil
}

// assembleContext fills dir with the build context docker/Dockerfile
// expects and returns the hex SHA-256 of that context.
func assembleContext(ctx context.Context, dir string, opts ImageOptions) (string, error) {
	bin := filepath.Join(dir, "testbed")
	// GOARCH follows this process: the daemon is expected to run on the
	// same machine (or at least the same architecture).
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+opts.Version, "-o", bin, "./cmd/testbed")
	cmd.Dir = opts.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	var out strings.Builder
	cmd.Stdout = io.MultiWriter(&out, opts.Log)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf(
			"build image: go build ./cmd/testbed in %s: %w\n%s",
			opts.ModuleDir,
			err,
			tail(out.String(), 4000),
		)
	}

	dockerfile := filepath.Join(opts.ModuleDir, "docker", "Dockerfile")
	if err := copyFile(dockerfile, filepath.Join(dir, "Dockerfile")); err != nil {
		return "", fmt.Errorf("build image: %w", err)
	}
	certs := filepath.Join(dir, "ca-certificates.crt")
	if err := copyFile(opts.CACerts, certs); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("build image: CA bundle: %w", err)
		}
		fmt.Fprintf(opts.Log, "warning: no CA bundle at %s; the image cannot verify TLS peers\n", opts.CACerts)
		if err := os.WriteFile(certs, nil, 0o644); err != nil {
			return "", fmt.Errorf("build image: %w", err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		return "", fmt.Errorf("build image: %w", err)
	}
	return hashContext(dir, opts.Version)
}

// hashContext hashes every file of the build context (names and bytes, in
// name order) and the version build argument: everything the image is made
// of, so equal hashes mean equal images.
func hashContext(dir, version string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel += "/"
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash build context: %w", err)
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "version=%s\n", version)
	for _, name := range names {
		fmt.Fprintf(h, "%s\n", name)
		if strings.HasSuffix(name, "/") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("hash build context: %w", err)
		}
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hash build context: %s: %w", name, err)
		}
		fmt.Fprintf(h, "\n%d\n", n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// removeStale removes this repo's content-tagged images other than keep.
// Failures are reported to log and otherwise ignored: an image still used by
// a container (another test process) must stay, and a leftover image is
// only disk space.
func removeStale(ctx context.Context, cli *testcontainers.DockerClient, repo, keep string, log io.Writer) {
	list, err := cli.ImageList(ctx, client.ImageListOptions{
		Filters: make(client.Filters).Add("label", cacheLabel+"=true").Add("reference", repo),
	})
	if err != nil {
		fmt.Fprintf(log, "list stale images: %v\n", err)
		return
	}
	for _, img := range list.Items {
		for _, ref := range img.RepoTags {
			r, t, ok := strings.Cut(ref, ":")
			if !ok || r != repo || t == keep || !strings.HasPrefix(t, contentTagPrefix) {
				continue
			}
			if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil {
				fmt.Fprintf(log, "keep stale image %s: %v\n", ref, err)
				continue
			}
			fmt.Fprintf(log, "removed stale image %s\n", ref)
		}
	}
}

// ImagePresent reports whether the Docker daemon has the image ref locally.
// Use it to skip what needs an image this engine cannot pull.
func ImagePresent(ctx context.Context, ref string) (bool, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false, fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
	return true, nil
}

// goTool is the go command: the one on PATH, else the one of the toolchain
// that built this binary (go test may run with a PATH that lacks it).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// tail keeps the last n bytes of s, where a failed build says what failed.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
