// Package docker runs the testbed and real inference servers in containers,
// through testcontainers-go, the way users run them: the mock from the same
// FROM-scratch image `make image` builds, and vLLM / TGI on GPU hosts.
//
// The directory also holds what users run without Go: the Dockerfile of the
// testbed image, compose files for a GPU host (vLLM or TGI + DCGM exporter +
// a harness job) and for a machine without a GPU (mock + harness job), and
// the plans those jobs run (plans/). See README.md beside this file.
//
// BuildImage compiles ./cmd/testbed with CGO_ENABLED=0 into a temporary build
// context and builds the image there; the tag is a hash of the context, so
// tests that ask for the image build it once. StartMock starts the mock from
// that image and waits for /health; StartVLLM and StartTGI start the real
// servers with GPU device requests and wait, for as long as loading a model
// takes, until they serve.
//
// This engine may have no registry (the project's own machines have none), so
// nothing here pulls an image: the testbed image is built locally, and vLLM /
// TGI images must already be present (ImagePresent says whether they are).
// Testcontainers' reaper (Ryuk) is an image too: run with
// TESTCONTAINERS_RYUK_DISABLED=true and end every container with
// testcontainers.CleanupContainer or Terminate.
package docker
