# The README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
GO      ?= go
# go-nvml binds every NVML symbol, deprecated ones too; their warnings drown test output.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build demo test vet fmt-check bench fuzz image clean gpu-check

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/testbed ./cmd/testbed

# A first result with no server to set up: the mock in-process, a short ladder.
demo:
	$(GO) run ./cmd/testbed demo

# Static binary for the FROM-scratch image.
bin/testbed-static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/testbed-static ./cmd/testbed

# The testbed image, FROM scratch around bin/testbed-static (see docker/Dockerfile).
# bin/image is the whole build context, so nothing else of the tree reaches the
# daemon. -B rebuilds the binary every time: its rule has no prerequisites, and
# an image around a stale binary is the worst kind of wrong.
IMAGE    ?= testbed:latest
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt

image:
	$(MAKE) -B bin/testbed-static
	rm -rf bin/image && mkdir -p bin/image/empty
	cp docker/Dockerfile bin/image/Dockerfile
	cp bin/testbed-static bin/image/testbed
	if [ -r "$(CA_CERTS)" ]; then cp "$(CA_CERTS)" bin/image/ca-certificates.crt; \
	else echo "warning: no CA bundle at $(CA_CERTS); the image cannot verify TLS" >&2; : > bin/image/ca-certificates.crt; fi
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) bin/image

# The race detector slows client and mock several-fold, so under -race the
# timing-dependent checks of the knee examples (batch slots, KV cache,
# compute), the two-provider comparison, the HTTP fit round trip, the
# regression verdicts on the mock, the compare command, the round trips an
# emulated link adds and the network example's conclusion only log their
# findings, and the scale-out equivalence (five processes timed against the
# mock) skips; the second pass, one package at a time, enforces them
# without it.
TIMING_TESTS := TestKneeExample|TestKVCacheExample|TestComputeExample|TestCompareExample|TestFitRoundTripHTTP|TestCompareOnMock|TestLinkAddsRoundTrips|TestCompareCLI|TestNetworkExample|TestScaleOutEqualsOneProcess

# The container tests run on their own, after the rest: their harness and
# mock run outside this process, so they time real streams on the machine's
# two cores, and another package's tests running beside them would be
# measured too.
test: vet fmt-check
	$(GO) test -race -timeout 20m $$($(GO) list ./... | grep -v "/docker$$")
	$(GO) test -race -timeout 10m ./docker/
	$(GO) test -p 1 -count=1 -timeout 10m -run '$(TIMING_TESTS)' ./harness/ ./harness/report/ ./calibration/fit/ ./harness/history/ ./cmd/testbed/

# On a machine with an NVIDIA GPU: builds with cgo, samples NVML while a
# PyTorch matmul load runs (skipped, with the reason, where there is no
# driver or no torch), prints the per-second figures and checks them.
gpu-check:
	GO=$(GO) bash scripts/gpu-check.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The mock's load benchmark: 2,000 streams at ITL 20 ms through a real TCP
# listener; reports tokens/s and emission-lateness percentiles. One run
# (-benchtime 1x) is one full ramp-steady-drain scenario.
bench:
	$(GO) test -run '^$$' -bench 'BenchmarkStreams' -benchtime 1x -timeout 10m ./mockllm/

clean:
	rm -rf bin results
