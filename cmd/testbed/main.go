// Command testbed is the one CLI of the inference testbed: the calibrated mock
// server, the load harness, calibration and reports, as subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// command is one subcommand. Each lives in its own file and adds itself to
// commands from an init function, so subcommands never edit each other's files.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("testbed: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error already explained to the user; main exits 2.
var errUsage = errors.New("usage")

// errHelp ends a command whose -h printed its usage: run returns nil.
var errHelp = errors.New("help shown")

// parseFlags parses args into fs, which prints its own usage and errors:
// -h ends the command successfully (errHelp), any other error is a usage
// error.
//
// The flag package's own output (the error, then the whole usage text) is
// silenced: a bad flag comes back as a usage error that run prints last,
// with a one-line hint, so it does not scroll away under the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "usage: testbed %s [flags]\n", fs.Name())
			fs.PrintDefaults()
		}
		return errHelp
	default:
		return fmt.Errorf("%w: %w", err, errUsage)
	}
}

// usageMessage is what a usage error says, without the marker.
func usageMessage(err error) string { return strings.TrimSuffix(err.Error(), ": "+errUsage.Error()) }

// Exit statuses; docs/failure.md explains them.
const (
	exitError       = 1   // the command failed (bad plan, unreachable target, I/O)
	exitUsage       = 2   // bad flags or arguments
	exitNoSuccess   = 3   // the run finished, but not one request succeeded
	exitInterrupted = 130 // the run was interrupted (Ctrl-C, SIGTERM); results are written
)

// statusError is an error with its own exit status.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// exitCode is the process's exit status for err.
func exitCode(err error) int {
	var se *statusError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.As(err, &se):
		return se.code
	default:
		return exitError
	}
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = withStop(ctx, interrupts(cancel, os.Stderr))
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel()
	code := exitCode(err)
	if err != nil && code != exitUsage {
		fmt.Fprintln(os.Stderr, "testbed:", err)
	}
	os.Exit(code)
}

// interrupts handles Ctrl-C and SIGTERM: the first cancels ctx (a run
// stops scheduling and lets in-flight requests finish within its grace
// period), the second closes the returned channel (a run cancels them at
// once and writes its files), the third exits on the spot.
func interrupts(cancel context.CancelFunc, stderr io.Writer) <-chan struct{} {
	sig := make(chan os.Signal, 3)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	return onInterrupts(sig, cancel, stderr, os.Exit)
}

// onInterrupts is interrupts' escalation, on any channel of signals.
func onInterrupts(sig <-chan os.Signal, cancel context.CancelFunc, stderr io.Writer, exit func(int)) <-chan struct{} {
	stop := make(chan struct{})
	go func() {
		<-sig
		fmt.Fprintln(stderr, "\ninterrupted: finishing in-flight requests; press Ctrl-C again to stop at once")
		cancel()
		<-sig
		fmt.Fprintln(stderr, "\nstopping now: cancelling in-flight requests and writing the results")
		close(stop)
		<-sig
		exit(exitInterrupted)
	}()
	return stop
}

type stopKey struct{}

// withStop attaches the second-interrupt channel to ctx for commands that run plans.
func withStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// stopOf is ctx's second-interrupt channel; nil (never ready) when none.
func stopOf(ctx context.Context) <-chan struct{} {
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	return stop
}

// run dispatches args[0] to its subcommand. Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintln(stdout, "testbed", version)
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("unknown command %q: %w", args[0], errUsage)
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case errors.Is(err, errHelp):
		return nil
	case errors.Is(err, errUsage) && err != errUsage:
		// The error is the last line, under a one-line hint.
		fmt.Fprintf(stderr, "(run 'testbed %s -h' for its flags)\ntestbed %s: %s\n", c.name, c.name, usageMessage(err))
	}
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: testbed <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "  version    print the version")
	fmt.Fprintln(w, "\nRun 'testbed <command> -h' for a command's flags.")
}
