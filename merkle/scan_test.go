package merkle

import (
	"errors"
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
