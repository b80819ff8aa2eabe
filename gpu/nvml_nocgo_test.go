//go:build !cgo

package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/llm-testbed/testbed/harness/results"
)

func TestOpenNVMLWithoutCgo(t *testing.T) {
	t.Parallel()
	n, err := OpenNVML()
	if n != nil || err == nil || !strings.HasPrefix(err.Error(), "NVML not available") {
		t.Fatalf("OpenNVML = %v, %v; want \"NVML not available\"", n, err)
	}
	if err := (&NVML{}).Read(context.Background(), &results.Sample{}); err == nil {
		t.Error("Read succeeded without cgo")
	}
}
