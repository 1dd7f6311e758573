package merkle

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLineWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	h := LeafHash([]byte("by hash"))
	// An existing file whose last line a crash tore.
	os.WriteFile(path, []byte("\"first\"\n{\"hash\":\""+h.String()+"\"}\n\"tor"), 0o644)
	var logs bytes.Buffer
	w, err := OpenLineWriter(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if w.Count() != 2 || !strings.Contains(logs.String(), "truncated torn last line") {
		t.Fatalf("count %d, log %q", w.Count(), logs.String())
	}
	if err := w.Append([]Entry{{Kind: LineLeaf, Leaf: `{"a":"<&>"}`}, {Kind: LineHash, Hash: h}}); err != nil {
		t.Fatal(err)
	}
	// An entry that cannot be written leaves the file as it was.
	if err := w.Append([]Entry{{Kind: LineLeaf, Leaf: "ok"}, {Kind: LineLeaf, Leaf: "bad\xff"}}); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	if w.Count() != 4 {
		t.Fatalf("count %d after a refused append", w.Count())
	}
	if _, err := OpenLineWriter(path, nil); err == nil {
		t.Fatal("a second writer opened a locked file")
	}
	w.Close()
	f, _ := os.Open(path)
	entries, err := ReadLogFile(f)
	f.Close()
	if err != nil || len(entries) != 4 || entries[2].Leaf != `{"a":"<&>"}` || entries[3].Hash != h {
		t.Fatalf("read back: %v %+v", err, entries)
	}
}
