//go:build unix

package receipt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileCapped: a file up to the limit is read whole (empty, small, exactly the
// limit), one byte more is refused with a message naming the file and the limit, and
// a FIFO, whose size stat cannot tell, is read and capped the same way.
func TestReadFileCapped(t *testing.T) {
	dir := t.TempDir()
	const limit = 10000
	for _, n := range []int{0, 1, 511, 512, 4097, limit} {
		p := filepath.Join(dir, "ok")
		want := bytes.Repeat([]byte{'x'}, n)
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFileCapped(p, limit)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read %d bytes, %v", n, len(got), err)
		}
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, limit+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFileCapped(big, limit); err == nil || !strings.Contains(err.Error(), "big is larger than 10000 bytes") {
		t.Fatalf("a file over the limit: %v", err)
	}
	for _, n := range []int{limit, limit + 1} {
		fifo := filepath.Join(dir, "fifo")
		os.Remove(fifo)
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err == nil {
				w.Write(make([]byte, n))
				w.Close()
			}
		}()
		got, err := ReadFileCapped(fifo, limit)
		if n <= limit && (err != nil || len(got) != n) {
			t.Fatalf("a FIFO of %d bytes: %d read, %v", n, len(got), err)
		}
		if n > limit && err == nil {
			t.Fatalf("a FIFO of %d bytes was read whole", n)
		}
	}
}
