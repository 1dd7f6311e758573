// Package svcbin builds the svc binary for tests that run it as a separate process
// (a crash test that sends SIGKILL, a witness on "another machine", an MCP client
// that spawns the gateway).
package svcbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Main builds svc into a temporary directory, sets *path to it, runs the tests and
// exits. Call it from TestMain.
func Main(m *testing.M, path *string) { MainWith(m, path, nil) }

// MainWith is Main that also runs also(dir) before the tests, to build more binaries
// into the same temporary directory (removed with it).
func MainWith(m *testing.M, path *string, also func(dir string) error) {
	dir, err := os.MkdirTemp("", "svc-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*path = filepath.Join(dir, "svc")
	if fuzzWorker() {
		// A fuzzing worker runs only fuzz targets, which start no process; building
		// here spent seconds of each worker's start inside -fuzztime (a 5 s run then
		// failed with "context deadline exceeded" before its baseline coverage).
		os.Exit(m.Run())
	}
	if out, err := exec.Command("go", "build", "-o", *path, "svc.dev/svc/cmd/svc").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build svc: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if also != nil {
		if err := also(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fuzzWorker reports whether this test process is a fuzzing worker, which the
// coordinator (go test -fuzz) starts with -test.fuzzworker.
func fuzzWorker() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.fuzzworker" || strings.HasPrefix(a, "-test.fuzzworker=") {
			return true
		}
	}
	return false
}
