package merkle

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// captureLogger returns a logger writing text records to the returned buffer.
func captureLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func openLog(t *testing.T, path string, opts LogFileOptions) *LogFile {
	t.Helper()
	l, err := OpenLogFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sampleEntries are entries of every kind, with leaves that need escaping.
func sampleEntries() []Entry {
	return []Entry{
		{Kind: LineLeaf, Leaf: `{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`},
		{Kind: LineHash, Hash: LeafHash([]byte("hashed"))},
		{Kind: LineLeaf, Leaf: "quote \" backslash \\ newline \n tab \t nul \x00 <>& é 漢 \u2028 😀"},
		{Kind: LinePruned, Hash: LeafHash([]byte("gone"))},
		{Kind: LineLeaf, Leaf: ""},
	}
}

func withHash(e Entry) Entry {
	if e.Kind == LineLeaf {
		e.Hash = LeafHash([]byte(e.Leaf))
	}
	return e
}

func TestLogFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l := openLog(t, path, LogFileOptions{})
	if l.Size() != 0 || l.Tree().Root() != EmptyRoot {
		t.Fatal("new log is not empty")
	}
	entries := sampleEntries()
	if i, err := l.AppendLeaf(entries[0].Leaf); err != nil || i != 0 {
		t.Fatalf("AppendLeaf = %d, %v", i, err)
	}
	if i, err := l.AppendHash(entries[1].Hash); err != nil || i != 1 {
		t.Fatalf("AppendHash = %d, %v", i, err)
	}
	if i, err := l.AppendBatch(entries[2:]); err != nil || i != 2 {
		t.Fatalf("AppendBatch = %d, %v", i, err)
	}
	if i, err := l.AppendBatch(nil); err != nil || i != 5 {
		t.Fatalf("empty AppendBatch = %d, %v", i, err)
	}
	ref := buildTree(t, NewMemoryStore(), nil)
	for _, e := range entries {
		ref.Append(withHash(e).Hash)
	}
	check := func(l *LogFile) {
		t.Helper()
		if l.Size() != uint64(len(entries)) || l.Tree().Size() != l.Size() {
			t.Fatalf("Size = %d, tree %d", l.Size(), l.Tree().Size())
		}
		if l.Tree().Root() != ref.Root() {
			t.Fatalf("root %s, want %s", l.Tree().Root(), ref.Root())
		}
		for i, want := range entries {
			got, err := l.Entry(uint64(i))
			if err != nil || got != withHash(want) {
				t.Errorf("Entry(%d) = %+v, %v; want %+v", i, got, err, withHash(want))
			}
			if idx, ok := l.IndexOf(withHash(want).Hash); !ok || idx != uint64(i) {
				t.Errorf("IndexOf(entry %d) = %d, %v", i, idx, ok)
			}
		}
		if _, err := l.Entry(uint64(len(entries))); !errors.Is(err, ErrIndexOutOfRange) {
			t.Errorf("Entry past the end: %v", err)
		}
		if _, ok := l.IndexOf(LeafHash([]byte("absent"))); ok {
			t.Error("IndexOf of an absent hash found it")
		}
	}
	check(l)

	// The file holds exactly the three line kinds.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	want := []string{
		`"{\"payloadType\":\"application/vnd.in-toto+json\",\"payload\":\"e30=\",\"signatures\":[]}"`,
		`{"hash":"` + entries[1].Hash.String() + `"}`,
		`"quote \" backslash \\ newline \n tab \t nul \u0000 <>& é 漢 \u2028 😀"`,
		`{"pruned":"` + entries[3].Hash.String() + `"}`,
		`""`,
	}
	if len(lines) != len(want) {
		t.Fatalf("file has %d lines:\n%s", len(lines), data)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %s, want %s", i+1, lines[i], want[i])
		}
	}
	if parsed, err := ReadLogFile(bytes.NewReader(data)); err != nil || len(parsed) != len(entries) {
		t.Fatalf("ReadLogFile = %d entries, %v", len(parsed), err)
	}

	// Reopen: same entries, same tree.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendLeaf("x"); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendLeaf after Close: %v", err)
	}
	if _, err := l.Entry(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Entry after Close: %v", err)
	}
	check(openLog(t, path, LogFileOptions{}))
}

func TestLogFileRejectsBadEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l := openLog(t, path, LogFileOptions{})
	l.AppendLeaf("ok")
	cases := []struct {
		name    string
		entries []Entry
		want    error
	}{
		{"invalid UTF-8", []Entry{{Kind: LineLeaf, Leaf: "a\xffb"}}, ErrInvalidLeaf},
		{"wrong hash", []Entry{{Kind: LineLeaf, Leaf: "a", Hash: LeafHash([]byte("b"))}}, ErrInvalidLeaf},
		{"hash entry with leaf", []Entry{{Kind: LineHash, Leaf: "a"}}, ErrInvalidLeaf},
		{"unknown kind", []Entry{{Kind: 7}}, ErrInvalidLeaf},
		{"too long", []Entry{{Kind: LineLeaf, Leaf: strings.Repeat("a", MaxLineSize-1)}}, ErrLineTooLong},
		{"too long after escaping", []Entry{{Kind: LineLeaf, Leaf: strings.Repeat("\"", MaxLineSize/2)}}, ErrLineTooLong},
		{"bad entry after good ones", []Entry{{Kind: LineLeaf, Leaf: "fine"}, {Kind: LineLeaf, Leaf: "\xff"}}, ErrInvalidLeaf},
	}
	for _, c := range cases {
		if _, err := l.AppendBatch(c.entries); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// The longest leaf that fits.
	long := strings.Repeat("a", MaxLineSize-2)
	if _, err := l.AppendLeaf(long); err != nil {
		t.Fatalf("leaf line of exactly MaxLineSize: %v", err)
	}
	// Nothing of the failed batches reached the file.
	if l.Size() != 2 {
		t.Fatalf("Size = %d, want 2", l.Size())
	}
	l.Close()
	l2 := openLog(t, path, LogFileOptions{})
	if e, err := l2.Entry(1); err != nil || e.Leaf != long {
		t.Fatalf("reopened: Entry(1) = %d bytes, %v", len(e.Leaf), err)
	}
	if l2.Size() != 2 {
		t.Fatalf("reopened Size = %d", l2.Size())
	}
}

// writeLog writes entries to a new log file and returns the path and the
// tree root after each entry.
func writeLog(t *testing.T, entries []Entry) (string, []Hash) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l, err := OpenLogFile(path, LogFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := []Hash{l.Tree().Root()}
	for _, e := range entries {
		if _, err := l.AppendBatch([]Entry{e}); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, l.Tree().Root())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, roots
}

func appendToFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestLogFileTornLastLine(t *testing.T) {
	entries := sampleEntries()
	for _, tail := range []string{
		`"half a le`,                          // no newline, not JSON
		`{"hash":"` + strings.Repeat("a", 20), // no newline, not JSON
		`"complete but unterminated"`,         // valid JSON, but no newline: never acknowledged
		"\x00\x00\x00\x00",                    // zero-filled tail
		`{"hash":"zz"}` + "\n",                // terminated, but not one of the kinds
		"\n",                                  // an empty last line
	} {
		t.Run(strconv.Quote(tail), func(t *testing.T) {
			path, roots := writeLog(t, entries)
			before, _ := os.Stat(path)
			appendToFile(t, path, tail)
			logger, logs := captureLogger()
			l := openLog(t, path, LogFileOptions{Logger: logger})
			if l.Size() != uint64(len(entries)) || l.Tree().Root() != roots[len(entries)] {
				t.Fatalf("after repair: size %d root %s", l.Size(), l.Tree().Root())
			}
			after, _ := os.Stat(path)
			if after.Size() != before.Size() {
				t.Fatalf("file is %d bytes after repair, want %d", after.Size(), before.Size())
			}
			msg := logs.String()
			for _, want := range []string{"level=WARN", "torn", "file=" + path,
				"offset=" + strconv.FormatInt(before.Size(), 10),
				"dropped_bytes=" + strconv.Itoa(len(tail))} {
				if !strings.Contains(msg, want) {
					t.Errorf("warning %q lacks %q", msg, want)
				}
			}
			// The next append works and lands on a line of its own.
			if i, err := l.AppendLeaf("next"); err != nil || i != uint64(len(entries)) {
				t.Fatalf("append after repair = %d, %v", i, err)
			}
			root := l.Tree().Root()
			l.Close()
			logger, logs = captureLogger()
			l2 := openLog(t, path, LogFileOptions{Logger: logger})
			if l2.Size() != uint64(len(entries))+1 || l2.Tree().Root() != root {
				t.Fatalf("reopen after repair and append: size %d", l2.Size())
			}
			if logs.Len() != 0 {
				t.Errorf("second open warned: %s", logs)
			}
			if e, err := l2.Entry(uint64(len(entries))); err != nil || e.Leaf != "next" {
				t.Fatalf("Entry = %+v, %v", e, err)
			}
		})
	}
}

func TestLogFileCorruptMiddleLine(t *testing.T) {
	for _, bad := range []string{
		`"unterminated`,
		`{"hash":"` + strings.Repeat("g", 64) + `"}`,
		`{"leaf":"x"}`,
		`42`,
		``,
		`{"hash":"` + strings.Repeat("a", 64) + `","pruned":"` + strings.Repeat("a", 64) + `"}`,
		"\"bad utf-8 \xff\"",
	} {
		t.Run(strconv.Quote(bad), func(t *testing.T) {
			path, _ := writeLog(t, sampleEntries()[:2])
			appendToFile(t, path, bad+"\n")
			appendToFile(t, path, `"a good line after it"`+"\n")
			before, _ := os.ReadFile(path)
			_, err := OpenLogFile(path, LogFileOptions{})
			var le *LineError
			if !errors.As(err, &le) || le.Line != 3 || !errors.Is(err, ErrMalformedLine) {
				t.Fatalf("err = %v, want a LineError for line 3 wrapping ErrMalformedLine", err)
			}
			if !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file and line", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("the file was changed")
			}
			// The lock was released, and prune refuses the file too.
			if _, err := PruneLogFile(path, func(uint64, string) bool { return true }); !errors.Is(err, ErrMalformedLine) {
				t.Errorf("PruneLogFile of the corrupt file: %v", err)
			}
		})
	}
}

func TestLogFileLineTooLong(t *testing.T) {
	path, _ := writeLog(t, sampleEntries()[:1])
	appendToFile(t, path, `"`+strings.Repeat("x", MaxLineSize)+`"`+"\n")
	appendToFile(t, path, `"after"`+"\n")
	_, err := OpenLogFile(path, LogFileOptions{})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want LineError line 2 wrapping ErrLineTooLong", err)
	}
}

// TestLogFileCrashAtEveryOffset cuts the file at every byte of its last line
// (as a crash during the last append may leave it) and checks that opening
// gives the tree before that append, or after it if the line is complete.
func TestLogFileCrashAtEveryOffset(t *testing.T) {
	entries := sampleEntries()
	for _, last := range []Entry{
		{Kind: LineLeaf, Leaf: `{"a":"b\"c","d":[1,2]} é`},
		{Kind: LineHash, Hash: LeafHash([]byte("h"))},
		{Kind: LinePruned, Hash: LeafHash([]byte("p"))},
	} {
		t.Run(last.Kind.String(), func(t *testing.T) {
			path, roots := writeLog(t, append(entries[:len(entries):len(entries)], last))
			full, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			start := bytes.LastIndexByte(full[:len(full)-1], '\n') + 1
			n := len(entries)
			for cut := start; cut <= len(full); cut++ {
				p := filepath.Join(t.TempDir(), fmt.Sprintf("cut-%d", cut))
				if err := os.WriteFile(p, full[:cut], 0o644); err != nil {
					t.Fatal(err)
				}
				logger, logs := captureLogger()
				l, err := OpenLogFile(p, LogFileOptions{Logger: logger})
				if err != nil {
					t.Fatalf("cut at %d: %v", cut, err)
				}
				wantSize, wantLen := n, start
				if cut == len(full) {
					wantSize, wantLen = n+1, len(full)
				}
				if l.Size() != uint64(wantSize) || l.Tree().Root() != roots[wantSize] {
					t.Fatalf("cut at %d: size %d root %s, want %d %s", cut, l.Size(), l.Tree().Root(), wantSize, roots[wantSize])
				}
				if st, _ := os.Stat(p); st.Size() != int64(wantLen) {
					t.Fatalf("cut at %d: file is %d bytes, want %d", cut, st.Size(), wantLen)
				}
				if warned := logs.Len() > 0; warned != (cut != start && cut != len(full)) {
					t.Fatalf("cut at %d: warned %v: %s", cut, warned, logs)
				}
				l.Close()
			}
		})
	}
}

func TestLogFileWithFileStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	storeDir := filepath.Join(dir, "tree")
	open := func() *LogFile {
		t.Helper()
		s, err := OpenFileStore(storeDir)
		if err != nil {
			t.Fatal(err)
		}
		l, err := OpenLogFile(path, LogFileOptions{Store: s})
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		return l
	}
	leaves := make([]string, 300)
	for i := range leaves {
		leaves[i] = fmt.Sprintf(`{"receipt":%d}`, i)
	}
	ref := buildTree(t, NewMemoryStore(), nil)
	for _, s := range leaves {
		ref.Append(LeafHash([]byte(s)))
	}

	l := open()
	for _, s := range leaves[:200] {
		if _, err := l.AppendLeaf(s); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l = open()
	if l.Size() != 200 {
		t.Fatalf("reopened size %d", l.Size())
	}
	if r, _ := ref.RootAt(200); l.Tree().Root() != r {
		t.Fatal("reopened root differs")
	}
	var batch []Entry
	for _, s := range leaves[200:] {
		batch = append(batch, Entry{Kind: LineLeaf, Leaf: s})
	}
	if _, err := l.AppendBatch(batch); err != nil {
		t.Fatal(err)
	}
	l.Close()

	t.Run("store behind the file", func(t *testing.T) {
		// Lose the store's last leaves: the file fills them in.
		os.Truncate(filepath.Join(storeDir, LevelFileName(0)), 250*HashSize)
		l := open()
		defer l.Close()
		if l.Size() != 300 || l.Tree().Root() != ref.Root() {
			t.Fatalf("size %d root %s, want 300 %s", l.Size(), l.Tree().Root(), ref.Root())
		}
	})
	t.Run("store ahead of the file", func(t *testing.T) {
		data, _ := os.ReadFile(path)
		lines := bytes.SplitAfter(data, []byte("\n"))
		os.WriteFile(path, bytes.Join(lines[:290], nil), 0o644)
		s, err := OpenFileStore(storeDir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := OpenLogFile(path, LogFileOptions{Store: s}); !errors.Is(err, ErrCorruptStore) {
			t.Fatalf("err = %v, want ErrCorruptStore", err)
		}
	})
	t.Run("store of another log", func(t *testing.T) {
		// Longer than the store, so only the leaf-by-leaf check catches it.
		other := filepath.Join(dir, "other.jsonl")
		var b strings.Builder
		for i := range 400 {
			fmt.Fprintf(&b, "\"something else %d\"\n", i)
		}
		os.WriteFile(other, []byte(b.String()), 0o644)
		s, err := OpenFileStore(storeDir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := OpenLogFile(other, LogFileOptions{Store: s}); !errors.Is(err, ErrCorruptStore) {
			t.Fatalf("err = %v, want ErrCorruptStore", err)
		}
	})
}

func TestLogFileLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l := openLog(t, path, LogFileOptions{})
	if _, err := OpenLogFile(path, LogFileOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if _, err := PruneLogFile(path, func(uint64, string) bool { return true }); !errors.Is(err, ErrLocked) {
		t.Fatalf("prune of an open log: %v, want ErrLocked", err)
	}
	l.Close()
	openLog(t, path, LogFileOptions{})
}

func TestLogFileConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l := openLog(t, path, LogFileOptions{})
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errc := make(chan error, writers*each*2)
	for w := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				leaf := fmt.Sprintf("w%d-%d", w, i)
				idx, err := l.AppendLeaf(leaf)
				if err != nil {
					errc <- err
					return
				}
				size := l.Tree().Size()
				p, err := l.Tree().InclusionProof(idx, size)
				if err == nil {
					root, _ := l.Tree().RootAt(size)
					err = VerifyInclusion(idx, size, LeafHash([]byte(leaf)), p, root)
				}
				if err != nil {
					errc <- err
				}
			}
		}()
		go func() { // a reader
			defer wg.Done()
			for range each {
				if n := l.Size(); n > 0 {
					if _, err := l.Entry(n - 1); err != nil {
						errc <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if l.Size() != writers*each {
		t.Fatalf("size %d", l.Size())
	}
	seen := map[string]bool{}
	for i := range uint64(writers * each) {
		e, err := l.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		if idx, ok := l.IndexOf(e.Hash); !ok || idx != i {
			t.Fatalf("IndexOf(entry %d) = %d, %v", i, idx, ok)
		}
		seen[e.Leaf] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct leaves", len(seen))
	}
}

func TestLogFileIndexOfDuplicates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l := openLog(t, path, LogFileOptions{})
	l.AppendLeaf("a")
	l.AppendLeaf("b")
	l.AppendHash(LeafHash([]byte("a"))) // the same leaf hash again
	if i, ok := l.IndexOf(LeafHash([]byte("a"))); !ok || i != 0 {
		t.Fatalf("IndexOf = %d, %v; want the first index 0", i, ok)
	}
	l.Close()
	l = openLog(t, path, LogFileOptions{})
	if i, ok := l.IndexOf(LeafHash([]byte("a"))); !ok || i != 0 {
		t.Fatalf("after reopen IndexOf = %d, %v; want 0", i, ok)
	}
}

func TestParseLine(t *testing.T) {
	h := LeafHash([]byte("x"))
	hexs := h.String()
	good := []struct {
		line string
		want Entry
	}{
		{`"x"`, Entry{Kind: LineLeaf, Leaf: "x", Hash: h}},
		{` "x" `, Entry{Kind: LineLeaf, Leaf: "x", Hash: h}},
		{`"\u0078"`, Entry{Kind: LineLeaf, Leaf: "x", Hash: h}},
		{`""`, Entry{Kind: LineLeaf, Leaf: "", Hash: LeafHash(nil)}},
		{`{"hash":"` + hexs + `"}`, Entry{Kind: LineHash, Hash: h}},
		{`{ "hash" : "` + strings.ToUpper(hexs) + `" }` + "\r", Entry{Kind: LineHash, Hash: h}},
		{`{"pruned":"` + hexs + `"}`, Entry{Kind: LinePruned, Hash: h}},
	}
	for _, c := range good {
		got, err := ParseLine([]byte(c.line))
		if err != nil || got != c.want {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
		}
	}
	bad := []string{
		``, ` `, `x`, `null`, `1`, `[]`, `["x"]`, `true`, `"x`, `"x" "y"`, `"x"x`,
		`{}`, `{"hash":1}`, `{"hash":null}`, `{"hash":"` + hexs[:63] + `"}`,
		`{"hash":"` + hexs + `"`, `{"hash":"` + hexs + `"}}`, `{"hash":"` + hexs + `"} {}`,
		`{"Hash":"` + hexs + `"}`, `{"leaf":"x"}`, `{"hash":["` + hexs + `"]}`,
		`{"hash":"` + hexs + `","hash":"` + hexs + `"}`,
		`{"pruned":"` + hexs + `","hash":"` + hexs + `"}`,
		"\"a\xffb\"", "\"a\"\n", "{\"hash\":\n\"" + hexs + "\"}",
	}
	for _, line := range bad {
		if e, err := ParseLine([]byte(line)); !errors.Is(err, ErrMalformedLine) {
			t.Errorf("ParseLine(%q) = %+v, %v; want ErrMalformedLine", line, e, err)
		}
	}
	if _, err := ParseLine(make([]byte, MaxLineSize+1)); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("over-long line: %v", err)
	}
}

func TestReadLogFile(t *testing.T) {
	entries := sampleEntries()
	var buf []byte
	for _, e := range entries {
		var err error
		buf, _, err = appendLine(buf, e)
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadLogFile(bytes.NewReader(buf))
	if err != nil || len(got) != len(entries) {
		t.Fatalf("ReadLogFile = %d, %v", len(got), err)
	}
	for i := range got {
		if got[i] != withHash(entries[i]) {
			t.Errorf("entry %d = %+v", i, got[i])
		}
	}
	if got, err := ReadLogFile(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("empty input: %v, %v", got, err)
	}
	// A torn last line: the entries before it and ErrTornLine.
	got, err = ReadLogFile(bytes.NewReader(append(buf, `"torn`...)))
	if !errors.Is(err, ErrTornLine) || len(got) != len(entries) {
		t.Errorf("torn: %d entries, %v", len(got), err)
	}
	// A bad line in the middle: nothing but the error.
	got, err = ReadLogFile(strings.NewReader("\"a\"\n{}\n\"b\"\n"))
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || le.Offset != 4 || got != nil {
		t.Errorf("corrupt line 2: %v, %v", got, err)
	}
}

func TestLogFileWriteFailureIsSticky(t *testing.T) {
	path, roots := writeLog(t, sampleEntries())
	l := openLog(t, path, LogFileOptions{})
	// Swap in a read-only handle so that the next write fails.
	orig := l.f
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l.f = ro
	if _, err := l.AppendLeaf("lost"); err == nil {
		t.Fatal("append through a read-only handle succeeded")
	}
	l.f = orig
	ro.Close()
	if _, err := l.AppendLeaf("after failure"); err == nil || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("append after a failed write: %v; want the sticky error", err)
	}
	n := uint64(len(roots) - 1)
	if l.Size() != n || l.Tree().Root() != roots[n] {
		t.Fatal("a failed append changed the log")
	}
	l.Close()
	l2 := openLog(t, path, LogFileOptions{})
	if l2.Size() != n || l2.Tree().Root() != roots[n] {
		t.Fatal("reopened log differs")
	}
	if _, err := l2.AppendLeaf("works again"); err != nil {
		t.Fatal(err)
	}
}
