package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchNetem: --netem takes a profile's name or a YAML file of
// figures, and anything else is an error naming the profiles.
func TestBenchNetem(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "link.yaml")
	if err := os.WriteFile(file, []byte("latency: 10ms\nloss: 0.01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		arg     string
		latency time.Duration
		wantErr string
	}{
		{"profile", "cross-region", 35 * time.Millisecond, ""},               // the profile's one-way latency
		{"file", file, 10 * time.Millisecond, ""},                            // custom figures
		{"unknown", "moon", 0, "neither a profile (lan, same-region, cross"}, // lists the profiles
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _, err := benchPlan([]string{"--url", "http://h:1", "--model", "m", "--netem", tc.arg}, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := p.Targets[0].Network; n == nil || n.Latency.D() != tc.latency {
				t.Errorf("network %+v, want latency %v", n, tc.latency)
			}
		})
	}
}
