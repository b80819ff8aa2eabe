# The README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build demo test vet fmt-check bench fuzz image clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/testbed ./cmd/testbed

# Static binary for the FROM-scratch image.
bin/testbed-static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/testbed-static ./cmd/testbed

test: vet fmt-check
	$(GO) test -race -timeout 20m ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin results
