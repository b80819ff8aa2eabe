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

// TestFlagErrors: a bad flag or argument prints no usage text, only a
// one-line hint and the error as the last line; help text shows each
// default once.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // in the last line
	}{
		// A bad value names the flag and the problem.
		{"bad distribution", []string{"bench", "--url", "http://x", "--input-tokens", "abc"}, `-input-tokens`},
		// An unknown flag.
		{"unknown flag", []string{"run", "--nope"}, "not defined: -nope"},
		// A missing required flag.
		{"missing url", []string{"bench"}, "needs --url"},
		// A missing argument.
		{"no plan", []string{"run"}, "exactly one plan file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut)
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want a usage error", err)
			}
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "testbed "+tc.args[0]+": ") || !strings.Contains(last, tc.want) {
				t.Errorf("last line %q, want the error naming %q", last, tc.want)
			}
			if len(lines) != 2 || !strings.Contains(lines[0], "-h") {
				t.Errorf("want a hint and the error, got:\n%s", errOut.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"bench", "-h"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if s := errOut.String(); strings.Contains(s, ") (default") || strings.Contains(s, "-8bit") {
		t.Errorf("help text states a default twice or a nonsense one:\n%s", s)
	}
}
