// Command svc is the one binary of the service: key and grant tools, the verifier and
// auditor, and the servers. One file per subcommand; this file only dispatches.
//
// Exit codes: 0 success; 1 a failed check or any error at run time; 2 a usage error.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"syscall"
)

// command is one subcommand: run parses its own flags from args.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

// register adds a subcommand; each subcommand file calls it from init.
func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// exitCode lets a command choose its exit status (verify: 1 when a check fails)
// after it has printed its own report.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "svc: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ec):
		return int(ec)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "svc %s: %v\nRun 'svc %s --help' for usage.\n", args[0], err, args[0])
		return 2
	default:
		fmt.Fprintf(stderr, "svc %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "svc: signed tool-call receipts, their transparency log, and the tools to verify them.")
	fmt.Fprintln(w, "\nUsage: svc <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'svc <command> --help' for a command's flags.")
}

// usageError marks a bad command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// newFlagSet makes a FlagSet whose --help prints the summary, the usage line, a
// description and every flag.
func newFlagSet(name, usageLine, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("svc "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: svc %s %s\n\n%s\n\nFlags:\n", name, usageLine, description)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning a flag error into a usage error; flags may follow
// positional arguments (svc verify bundle.json --issuer-key k.pub).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// listFlag is a repeatable string flag (key options may repeat for rotation).
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint([]string(*l)) }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// startCPUProfile writes a CPU profile of this process to path (--cpuprofile) until
// the returned stop is called; with an empty path it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// A report is what verify, audit and log-check print: text for a person, or JSON.
type report interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
}

// writeReport prints rep to w (as JSON with asJSON); a report that did not pass is
// exit status 1.
func writeReport(w io.Writer, rep report, asJSON, passed bool) error {
	write := rep.WriteText
	if asJSON {
		write = rep.WriteJSON
	}
	if err := write(w); err != nil {
		return err
	}
	if !passed {
		return exitCode(1)
	}
	return nil
}
