package merkle

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPruneLogFile(t *testing.T) {
	const n = 50
	var entries []Entry
	for i := range n {
		if i%10 == 3 {
			entries = append(entries, Entry{Kind: LineHash, Hash: LeafHash([]byte(fmt.Sprint(i)))})
		} else {
			entries = append(entries, Entry{Kind: LineLeaf, Leaf: fmt.Sprintf(`{"receipt":%d,"s":"é\"<"}`, i)})
		}
	}
	path, roots := writeLog(t, entries)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	beforeLines := bytes.SplitAfter(before, []byte("\n"))

	// Every proof of the log before pruning.
	proofs := func() (incl, cons map[[2]uint64][]Hash) {
		l := openLog(t, path, LogFileOptions{})
		defer l.Close()
		incl, cons = map[[2]uint64][]Hash{}, map[[2]uint64][]Hash{}
		for size := uint64(1); size <= n; size++ {
			for i := range size {
				incl[[2]uint64{i, size}], _ = l.Tree().InclusionProof(i, size)
				cons[[2]uint64{i, size}], _ = l.Tree().ConsistencyProof(i, size)
			}
		}
		return incl, cons
	}
	incl, cons := proofs()

	var seen []uint64
	count, err := PruneLogFile(path, func(index uint64, leaf string) bool {
		if entries[index].Leaf != leaf {
			t.Errorf("prune(%d) got leaf %q, want %q", index, leaf, entries[index].Leaf)
		}
		seen = append(seen, index)
		return index%2 == 0
	})
	if err != nil {
		t.Fatal(err)
	}
	leafLines, wantPruned := 0, 0
	for i, e := range entries {
		if e.Kind == LineLeaf {
			leafLines++
			if i%2 == 0 {
				wantPruned++
			}
		}
	}
	if count != wantPruned || len(seen) != leafLines {
		t.Fatalf("pruned %d (want %d), callback saw %d leaves (want %d)", count, wantPruned, len(seen), leafLines)
	}

	after, _ := os.ReadFile(path)
	afterLines := bytes.SplitAfter(after, []byte("\n"))
	if len(afterLines) != len(beforeLines) {
		t.Fatalf("%d lines after prune, %d before", len(afterLines), len(beforeLines))
	}
	for i, e := range entries {
		h := withHash(e).Hash
		if e.Kind == LineLeaf && i%2 == 0 {
			if want := `{"pruned":"` + h.String() + "\"}\n"; string(afterLines[i]) != want {
				t.Errorf("line %d = %s, want %s", i+1, afterLines[i], want)
			}
		} else if !bytes.Equal(afterLines[i], beforeLines[i]) {
			t.Errorf("line %d changed: %s -> %s", i+1, beforeLines[i], afterLines[i])
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after prune, want 0600", st.Mode().Perm())
	}
	if names, _ := os.ReadDir(filepath.Dir(path)); len(names) != 1 {
		t.Errorf("directory holds %d files after prune, want only the log", len(names))
	}

	// Same roots, same proofs, entries of kind pruned.
	l := openLog(t, path, LogFileOptions{})
	for size := uint64(0); size <= n; size++ {
		if r, _ := l.Tree().RootAt(size); r != roots[size] {
			t.Fatalf("root of size %d changed by prune", size)
		}
	}
	for i, e := range entries {
		got, err := l.Entry(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		want := withHash(e)
		if e.Kind == LineLeaf && i%2 == 0 {
			want = Entry{Kind: LinePruned, Hash: want.Hash}
		}
		if got != want {
			t.Errorf("Entry(%d) = %+v, want %+v", i, got, want)
		}
	}
	l.Close()
	incl2, cons2 := proofs()
	for k, p := range incl {
		if !equalProofs(p, incl2[k]) {
			t.Fatalf("inclusion proof %v changed by prune", k)
		}
	}
	for k, p := range cons {
		if !equalProofs(p, cons2[k]) {
			t.Fatalf("consistency proof %v changed by prune", k)
		}
	}

	// Pruning again sees only the remaining leaf lines; pruning nothing
	// leaves the file alone.
	seen = nil
	count, err = PruneLogFile(path, func(index uint64, _ string) bool { seen = append(seen, index); return false })
	if err != nil || count != 0 || len(seen) != leafLines-wantPruned {
		t.Fatalf("second prune: %d, %v, saw %d", count, err, len(seen))
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, after) {
		t.Fatal("a prune of nothing changed the file")
	}
	count, err = PruneLogFile(path, func(uint64, string) bool { return true })
	if err != nil || count != leafLines-wantPruned {
		t.Fatalf("prune of the rest: %d, %v", count, err)
	}
	final, _ := os.ReadFile(path)
	if bytes.Count(final, []byte(`{"pruned":`)) != leafLines || bytes.Contains(final, []byte("receipt")) {
		t.Fatalf("after pruning everything:\n%s", final)
	}
	l = openLog(t, path, LogFileOptions{})
	if l.Tree().Root() != roots[n] {
		t.Fatal("root changed by the second prune")
	}
}

func TestPruneLogFileTornTail(t *testing.T) {
	path, roots := writeLog(t, sampleEntries())
	appendToFile(t, path, `"torn`)
	count, err := PruneLogFile(path, func(uint64, string) bool { return false })
	if err != nil || count != 0 {
		t.Fatalf("prune = %d, %v", count, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "torn") {
		t.Fatal("the torn line survived the prune")
	}
	logger, logs := captureLogger()
	l := openLog(t, path, LogFileOptions{Logger: logger})
	if l.Tree().Root() != roots[len(roots)-1] || logs.Len() != 0 {
		t.Fatalf("after prune: root %s, warnings %q", l.Tree().Root(), logs)
	}
}

func TestPruneLogFileMissing(t *testing.T) {
	_, err := PruneLogFile(filepath.Join(t.TempDir(), "absent"), func(uint64, string) bool { return true })
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}
