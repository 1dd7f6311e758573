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

func TestResumeLineWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	w, err := OpenLineWriter(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Append([]Entry{{Kind: LineLeaf, Leaf: "a"}, {Kind: LineLeaf, Leaf: "b"}})
	lines, off := w.Count(), w.Offset()
	w.Append([]Entry{{Kind: LineLeaf, Leaf: "c"}})
	w.Close()
	// A torn line after the recorded position is repaired at the right place.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte(`"tor`))
	f.Close()
	w, err = ResumeLineWriter(path, nil, lines, off)
	if err != nil {
		t.Fatal(err)
	}
	if w.Count() != 3 {
		t.Fatalf("resumed count %d, want 3", w.Count())
	}
	w.Append([]Entry{{Kind: LineLeaf, Leaf: "d"}})
	w.Close()
	f, _ = os.Open(path)
	entries, err := ReadLogFile(f)
	f.Close()
	if err != nil || len(entries) != 4 || entries[3].Leaf != "d" {
		t.Fatalf("after resume: %v %+v", err, entries)
	}
	// A recorded position past the end of the file (a file replaced) reads it whole.
	w, err = ResumeLineWriter(path, nil, 1000, 1<<30)
	if err != nil || w.Count() != 4 {
		t.Fatalf("stale position: %v %d", err, w.Count())
	}
	w.Close()
}
