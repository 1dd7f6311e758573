package merkle

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScanLogFileMatchesReadLogFile: the streaming reader gives the entries of
// ReadLogFile, and its errors for a malformed and a torn last line.
func TestScanLogFileMatchesReadLogFile(t *testing.T) {
	good := "\"a\"\n{\"hash\":\"" + LeafHash([]byte("b")).String() + "\"}\n\"c\"\n"
	want, err := ReadLogFile(strings.NewReader(good))
	if err != nil || len(want) != 3 {
		t.Fatalf("ReadLogFile: %d entries, %v", len(want), err)
	}
	var got []Entry
	if err := ScanLogFile(strings.NewReader(good), func(e Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	n := 0
	err = ScanLogFile(strings.NewReader(good+"\"torn"), func(Entry) error { n++; return nil })
	if !errors.Is(err, ErrTornLine) || n != 3 {
		t.Errorf("torn last line: %d entries, %v", n, err)
	}
	if err := ScanLogFile(strings.NewReader("nonsense\n\"a\"\n"), func(Entry) error { return nil }); err == nil {
		t.Error("a malformed line was accepted")
	}
	stop := errors.New("stop")
	if err := ScanLogFile(strings.NewReader(good), func(Entry) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("each's error: %v", err)
	}
}

// TestScanLogPath: the file at a path scanned as ScanLogFile scans it, never written;
// an error opening it is os.Open's as it is, a scan's is prefixed with the label.
func TestScanLogPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	torn := "\"a\"\n\"torn"
	if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := ScanLogPath(path, "log file "+path, func(Entry) error { n++; return nil })
	if !errors.Is(err, ErrTornLine) || n != 1 || !strings.HasPrefix(err.Error(), "log file "+path+": ") {
		t.Errorf("torn last line: %d entries, %v", n, err)
	}
	if b, _ := os.ReadFile(path); string(b) != torn {
		t.Errorf("the file was changed: %q", b)
	}
	stop := errors.New("stop")
	if err := ScanLogPath(path, path, func(Entry) error { return stop }); !errors.Is(err, stop) || err.Error() != path+": stop" {
		t.Errorf("each's error: %v", err)
	}
	missing := filepath.Join(dir, "none")
	_, openErr := os.Open(missing)
	err = ScanLogPath(missing, "label", func(Entry) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) || err.Error() != openErr.Error() {
		t.Errorf("missing file: %v, want %v", err, openErr)
	}
}
