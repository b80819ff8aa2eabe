//go:build !cgo

package gpu

import (
	"context"
	"errors"

	"github.com/llm-testbed/testbed/harness/results"
)

// errNoCgo is what OpenNVML says in a build without cgo: go-nvml loads
// libnvidia-ml through cgo, so a static binary cannot read the GPU. Use a
// Prometheus source against a DCGM exporter instead.
var errNoCgo = errors.New(
	"NVML not available: this binary was built without cgo (CGO_ENABLED=0); scrape a DCGM exporter with a Prometheus " +
		"source instead",
)

// NVMLOption configures OpenNVML; a build without cgo has none.
type NVMLOption func(*struct{})

// NVML is a Source reading local GPUs; in a build without cgo it cannot be
// opened.
type NVML struct{}

// OpenNVML always fails in a build without cgo.
func OpenNVML(...NVMLOption) (*NVML, error) { return nil, errNoCgo }

// Devices is 0.
func (*NVML) Devices() int { return 0 }

// Name is "nvml".
func (*NVML) Name() string { return "nvml" }

// Read fails: NVML is not available.
func (*NVML) Read(context.Context, *results.Sample) error { return errNoCgo }

// Close does nothing.
func (*NVML) Close() error { return nil }
