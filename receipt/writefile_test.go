package receipt_test

import (
	"os"
	"path/filepath"
	"testing"

	"svc.dev/svc/receipt"
)

// A bundle file written behind a call: the whole content under its name with mode
// 0644 whatever the umask, an existing file replaced, and no temporary file left.
func TestWriteFileNoSync(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := receipt.WriteFileNoSync(path, []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := receipt.WriteFileNoSync(path, []byte("second, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "second, longer" {
		t.Fatalf("read %q, %v", data, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only r.json", len(entries))
	}
	if err := receipt.WriteFileNoSync(filepath.Join(dir, "missing", "x.json"), []byte("x"), 0o644); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

// The bundle writer's form, relative to the receipts directory it holds open: the
// whole content with exactly the mode asked for, whether or not the umask hides some
// of its bits (0666 loses 0022 to the usual umask, 0640 loses nothing), an existing
// file replaced, nothing else left in the directory.
func TestWriteFileNoSyncIn(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct {
		name string
		perm os.FileMode
	}{{"a.json", 0o666}, {"b.json", 0o640}, {"a.json", 0o644}} {
		if err := receipt.WriteFileNoSyncIn(d, dir, c.name, []byte("data of "+c.name), c.perm); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(dir, c.name))
		if err != nil || st.Mode().Perm() != c.perm {
			t.Fatalf("%s: mode %v, want %v (%v)", c.name, st.Mode().Perm(), c.perm, err)
		}
		if data, err := os.ReadFile(filepath.Join(dir, c.name)); err != nil || string(data) != "data of "+c.name {
			t.Fatalf("%s: read %q, %v", c.name, data, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("directory holds %d entries, want a.json and b.json", len(entries))
	}
}
