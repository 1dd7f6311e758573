// Package svcbin builds the svc binary for tests that run it as a separate process
// (a crash test that sends SIGKILL, a witness on "another machine", an MCP client
// that spawns the gateway).
package svcbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
