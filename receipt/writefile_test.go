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
