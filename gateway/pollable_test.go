//go:build unix && !aix

package gateway_test

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"svc.dev/svc/gateway"
)

// An agent's stdin that is a pipe is read through the runtime's poller: the
// descriptor is non-blocking and lines written to the pipe arrive whole and in order.
// A regular file is returned as it is.
func TestPollableInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := unix.SetNonblock(int(r.Fd()), false); err != nil { // as a parent hands it over
		t.Fatal(err)
	}
	in := gateway.PollableInput(r)
	defer in.Close()
	flags, err := unix.FcntlInt(in.Fd(), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("stdin pipe flags %#x (%v): not non-blocking", flags, err)
	}
	go func() {
		w.Write([]byte("first line\n"))
		w.Write([]byte("second line\n"))
	}()
	sc := bufio.NewScanner(in)
	for _, want := range []string{"first line", "second line"} {
		if !sc.Scan() || sc.Text() != want {
			t.Fatalf("read %q (%v), want %q", sc.Text(), sc.Err(), want)
		}
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := gateway.PollableInput(f); got != f {
		t.Fatal("a regular file was replaced")
	}
}
