package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunUnknownCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"no-such-command"}, &out, &errOut)
	if !errors.Is(err, errUsage) {
		t.Fatalf("run(no-such-command) = %v, want a usage error", err)
	}
	if !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("error %q does not name the unknown command", err)
	}
	if !strings.Contains(errOut.String(), "usage: testbed") {
		t.Errorf("usage not printed, stderr: %q", errOut.String())
	}
}

func TestRunVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "testbed ") {
		t.Errorf("version output %q", out.String())
	}
}

// TestRunHelp: -h on every command prints its usage and succeeds, while a
// bad flag is a usage error (exit 2).
func TestRunHelp(t *testing.T) {
	t.Parallel()
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{name, "-h"}, &out, &errOut); err != nil {
				t.Errorf("%s -h = %v, want nil", name, err)
			}
			if !strings.Contains(errOut.String(), "-") {
				t.Errorf("%s -h printed no flags: %q", name, errOut.String())
			}
			if err := run(context.Background(), []string{name, "--no-such-flag"}, &out, &errOut); !errors.Is(
				err,
				errUsage,
			) {
				t.Errorf("%s --no-such-flag = %v, want a usage error", name, err)
			}
		})
	}
}
