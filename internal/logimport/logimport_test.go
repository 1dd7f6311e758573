package logimport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// logFile writes n lines of a SPEC log file starting at leaf number from: mostly
// leaves, every 7th a {hash} line and every 11th a {pruned} line. It returns the
// file and its root.
func logFile(t *testing.T, from, n int) ([]byte, merkle.Hash) {
	t.Helper()
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	var b bytes.Buffer
	for i := from; i < from+n; i++ {
		leaf := fmt.Sprintf(`{"payload":"leaf %d","payloadType":"application/vnd.in-toto+json","signatures":[]}`, i)
		h := merkle.LeafHash([]byte(leaf))
		switch {
		case i%11 == 0:
			fmt.Fprintf(&b, "{\"pruned\":\"%s\"}\n", h)
		case i%7 == 0:
			fmt.Fprintf(&b, "{\"hash\":\"%s\"}\n", h)
		default:
			q, _ := json.Marshal(leaf)
			b.Write(q)
			b.WriteByte('\n')
		}
		if _, err := tree.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	root, err := tree.RootAt(tree.Size())
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), root
}

// TestImport100k imports a 100,000-line file with leaf, hash and pruned lines into an
// enterprise tenant of a database-backed log and checks the log's root against the
// file's; a second run of the same file (an interrupted import resumed) changes
// nothing; a file that does not extend the log is refused.
func TestImport100k(t *testing.T) {
	srv := testkit.ListeningBroker(t)
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, _ := signer.GenerateKey()
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	dir := t.TempDir()
	svc, err := logservice.Start(ctx, logservice.Config{
		DataDir: dir, NATSURL: natsembed.URL(srv, "pw-of-tests"), Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "cp"), CheckpointEvery: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Hosted: &logservice.Hosted{Store: st},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, err := svc.Admin().AddTenant(ctx, "test", "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Admin().SetPlan(ctx, "test", "acme", "enterprise"); err != nil {
		t.Fatal(err)
	}
	file, root := logFile(t, 0, 100000)
	dir = t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var calls int
	start := time.Now()
	res, err := Import(ctx, svc.Conn(), "acme", write("log.jsonl", file), func(leaves, bytes uint64) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("imported %d leaves in %s: %.0f leaves/s", res.Leaves, took.Round(time.Millisecond), float64(res.Leaves)/took.Seconds())
	if res.Leaves != 100000 || res.RootHash != root.String() || calls == 0 {
		t.Fatalf("result %+v (progress calls %d), want 100000 leaves and root %s", res, calls, root)
	}
	tree := svc.Sequencer("acme").Tree()
	got, _ := tree.RootAt(100000)
	if tree.Size() != 100000 || got != root {
		t.Fatalf("the log holds %d leaves with root %s; want 100000 and %s", tree.Size(), got, root)
	}
	// Again (a finished import run twice): every leaf compared, nothing added.
	if again, err := Import(ctx, svc.Conn(), "acme", write("log.jsonl", file), nil); err != nil || again.RootHash != root.String() {
		t.Fatalf("importing the file again: %+v, %v", again, err)
	}
	// Half the file: the log holds more than it.
	if _, err := Import(ctx, svc.Conn(), "acme", write("half.jsonl", file[:bytes.LastIndexByte(file[:len(file)/2], '\n')+1]), nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("importing a prefix of the log: got %v, want ErrMismatch (the log holds more)", err)
	}
	if tree.Size() != 100000 {
		t.Fatalf("re-import added leaves: %d", tree.Size())
	}
	other, _ := logFile(t, 500000, 100010)
	_, err = Import(ctx, svc.Conn(), "acme", write("other.jsonl", other), nil)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a file that does not extend the log: got %v", err)
	}
	bad := []byte("\"new leaf\"\nnot json\n")
	if _, err := Import(ctx, svc.Conn(), "acme", write("bad.jsonl", bad), nil); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a malformed line: got %v, want an error naming line 2", err)
	}
	if tree.Size() != 100000 {
		t.Fatalf("a malformed file imported leaves: %d", tree.Size())
	}
}

// TestCheckReadsAsTheLogDoes: Check accepts what merkle.ScanLogFile accepts (the
// reader of svc log-check and of a verifier's log copy) and nothing else: a blank line
// and a last line without its newline are refused, naming the line, and a well-formed
// file gives its leaf hashes in order.
func TestCheckReadsAsTheLogDoes(t *testing.T) {
	dir := t.TempDir()
	file, root := logFile(t, 0, 30)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hashes, err := Check(write("good.jsonl", file))
	if err != nil || len(hashes) != 30 {
		t.Fatalf("a well-formed file: %d hashes, %v", len(hashes), err)
	}
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	for _, h := range hashes {
		if _, err := tree.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := tree.RootAt(30); got != root {
		t.Fatalf("root of Check's hashes %s, want %s", got, root)
	}
	first := file[:bytes.IndexByte(file, '\n')+1]
	blank := append(append(bytes.Clone(first), '\n'), first...)
	if _, err := Check(write("blank.jsonl", blank)); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a blank line: got %v, want an error naming line 2", err)
	}
	if _, err := Check(write("torn.jsonl", file[:len(file)-1])); !errors.Is(err, merkle.ErrTornLine) || !strings.Contains(err.Error(), "line 30") {
		t.Fatalf("a last line without its newline: got %v, want ErrTornLine naming line 30", err)
	}
	if _, err := Check(write("empty.jsonl", nil)); err == nil || !strings.Contains(err.Error(), "holds no leaves") {
		t.Fatalf("an empty file: got %v", err)
	}
}
