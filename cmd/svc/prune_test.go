package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// pruneFixture is a log file with receipts issued by an SDK issuer at chosen times.
type pruneFixture struct {
	logPath, receipts string
	bundles           map[string]*receipt.Bundle // bundle file name -> bundle, as issued
	roots             []merkle.Hash              // roots[s-1] is the root at size s
	lines             []string                   // the log file's lines before pruning
}

func newPruneFixture(t *testing.T) *pruneFixture {
	t.Helper()
	dir := t.TempDir()
	f := &pruneFixture{logPath: filepath.Join(dir, "log.jsonl"), receipts: filepath.Join(dir, "receipts"), bundles: map[string]*receipt.Bundle{}}
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	fl, err := receipt.OpenFileLog(f.logPath, key, "")
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	var id string
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: key, Kind: receipt.KindSDK, Log: fl, ReceiptsDir: f.receipts,
		Now: func() time.Time { return now }, NewID: func() string { return id }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	issue := func(rid string, at time.Duration, authorize bool) {
		t.Helper()
		now, id = t0.Add(at), rid
		p, err := is.Begin(testkit.ClaimedCall("bot", "echo", `{"n":"`+rid+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if authorize {
			if err := is.Authorize(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := is.Finish(ctx, p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"ok":true}`), Provenance: receipt.Claimed}); err != nil {
			t.Fatal(err)
		}
	}
	issue("r0", 0, false)                                            // pruned
	issue("r1", 30*time.Minute, true)                                // pruned, with its authorization
	issue("r2", 2*time.Hour, false)                                  // at the cutoff: kept
	if _, err := fl.File().AppendLeaf("not a receipt"); err != nil { // kept, warned about
		t.Fatal(err)
	}
	if _, err := fl.File().AppendHash(merkle.LeafHash([]byte("elsewhere"))); err != nil { // hash-only: untouched
		t.Fatal(err)
	}
	issue("r3", 3*time.Hour, false)   // kept
	issue("r4", 10*time.Minute, true) // pruned; its bundle files are removed by hand first

	size := fl.File().Size()
	for s := uint64(1); s <= size; s++ {
		r, err := fl.File().Tree().RootAt(s)
		if err != nil {
			t.Fatal(err)
		}
		f.roots = append(f.roots, r)
	}
	if err := fl.Close(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(f.receipts)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := receipt.ReadBundle(filepath.Join(f.receipts, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f.bundles[e.Name()] = b
	}
	if len(f.bundles) != 7 {
		t.Fatalf("issued %d bundle files, want 7", len(f.bundles))
	}
	for _, n := range []string{"r4.json", "r4.authorization.json"} {
		if err := os.Remove(filepath.Join(f.receipts, n)); err != nil {
			t.Fatal(err)
		}
	}
	f.lines = readLines(t, f.logPath)
	if uint64(len(f.lines)) != size || size != 9 {
		t.Fatalf("log has %d lines and size %d, want 9", len(f.lines), size)
	}
	return f
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			out = append(out, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPrune(t *testing.T) {
	f := newPruneFixture(t)
	mustRun(t, "prune", "--log", f.logPath, "--before", "2026-01-01T02:00:00Z", "--receipts", f.receipts)

	// Which leaves were pruned: those of r0, r1 (and its authorization), r4 (and its).
	pruned := map[uint64]bool{}
	for name, b := range f.bundles {
		if !strings.HasPrefix(name, "r2") && !strings.HasPrefix(name, "r3") {
			pruned[b.Inclusion.LeafIndex] = true
		}
	}
	if len(pruned) != 5 {
		t.Fatalf("fixture: %d leaves to prune, want 5", len(pruned))
	}

	// The pruned lines are {"pruned": <leaf hash>}; every other line is unchanged.
	lines := readLines(t, f.logPath)
	if len(lines) != len(f.lines) {
		t.Fatalf("log has %d lines after pruning, %d before", len(lines), len(f.lines))
	}
	for i, line := range lines {
		if !pruned[uint64(i)] {
			if line != f.lines[i] {
				t.Errorf("line %d changed:\n%s\n%s", i, f.lines[i], line)
			}
			continue
		}
		var leaf string
		if err := json.Unmarshal([]byte(f.lines[i]), &leaf); err != nil {
			t.Fatalf("line %d before pruning: %v", i, err)
		}
		var obj map[string]string
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %d after pruning is not an object: %s", i, line)
		}
		if len(obj) != 1 || obj["pruned"] != merkle.LeafHash([]byte(leaf)).String() {
			t.Errorf("line %d is %s, want {\"pruned\": %s}", i, line, merkle.LeafHash([]byte(leaf)))
		}
	}

	// Every root and every receipt's inclusion proof are unchanged.
	lf, err := merkle.OpenLogFile(f.logPath, merkle.LogFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if lf.Size() != uint64(len(f.roots)) {
		t.Fatalf("size %d after pruning, %d before", lf.Size(), len(f.roots))
	}
	tree := lf.Tree()
	for s := uint64(1); s <= lf.Size(); s++ {
		r, err := tree.RootAt(s)
		if err != nil {
			t.Fatal(err)
		}
		if r != f.roots[s-1] {
			t.Errorf("root at size %d changed", s)
		}
	}
	for name, b := range f.bundles {
		hashes, err := tree.InclusionProof(b.Inclusion.LeafIndex, b.Inclusion.TreeSize)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(receipt.HashStrings(hashes), b.Inclusion.Hashes) {
			t.Errorf("%s: inclusion proof changed", name)
		}
		th, err := receipt.DecodeTreeHead(b.TreeHead)
		if err != nil {
			t.Fatal(err)
		}
		root, err := merkle.ParseHash(th.RootHash)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkle.VerifyInclusion(b.Inclusion.LeafIndex, b.Inclusion.TreeSize, merkle.LeafHash(b.Envelope.Canonical()), hashes, root); err != nil {
			t.Errorf("%s: no longer verifies against its tree head: %v", name, err)
		}
	}

	// The old bundle files are gone, the newer ones remain.
	for _, gone := range []string{"r0.json", "r1.json", "r1.authorization.json", "r4.json", "r4.authorization.json"} {
		assertNoFile(t, filepath.Join(f.receipts, gone))
	}
	for _, kept := range []string{"r2.json", "r3.json"} {
		if _, err := os.Stat(filepath.Join(f.receipts, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
}

func TestPruneReports(t *testing.T) {
	f := newPruneFixture(t)
	code, stdout, stderr := runSvc(t, "prune", "--log", f.logPath, "--before", "2026-01-01T02:00:00Z", "--receipts", f.receipts)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"pruned 5 of 8 leaves", "2 newer kept", "deleted 3 bundle files", "2 already absent"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "kept 1 leaves that do not parse as receipts") {
		t.Errorf("no warning about the non-receipt leaf:\n%s", stderr)
	}
	// Again: nothing left to prune.
	code, stdout, _ = runSvc(t, "prune", "--log", f.logPath, "--before", "2026-01-01", "--receipts", f.receipts)
	if code != 0 || !strings.Contains(stdout, "pruned 0 of 3 leaves") {
		t.Errorf("second prune: exit %d:\n%s", code, stdout)
	}
}

func TestPruneKeepsABundleThatIsNotTheLeaf(t *testing.T) {
	f := newPruneFixture(t)
	// r0.json now holds r3's receipt: it is not the pruned envelope, so it stays.
	r3, _ := os.ReadFile(filepath.Join(f.receipts, "r3.json"))
	if err := os.WriteFile(filepath.Join(f.receipts, "r0.json"), r3, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runSvc(t, "prune", "--log", f.logPath, "--before", "2026-01-01T02:00:00Z", "--receipts", f.receipts)
	if code != 0 || !strings.Contains(stderr, "does not hold the envelope") || !strings.Contains(stdout, "1 kept") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(f.receipts, "r0.json")); err != nil {
		t.Fatal(err)
	}
}

func TestPruneUsage(t *testing.T) {
	f := newPruneFixture(t)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"prune", "--before", "2026-01-01", "--receipts", f.receipts}, 2},
		{[]string{"prune", "--log", f.logPath, "--receipts", f.receipts}, 2},
		{[]string{"prune", "--log", f.logPath, "--before", "2026-01-01"}, 2},
		{[]string{"prune", "--log", f.logPath, "--before", "yesterday", "--receipts", f.receipts}, 2},
		{[]string{"prune", "--log", f.logPath, "--before", "2026-01-01T00:00:00", "--receipts", f.receipts}, 2},
		{[]string{"prune", "--log", f.logPath + ".missing", "--before", "2026-01-01", "--receipts", f.receipts}, 1},
		{[]string{"prune", "--log", f.logPath, "--before", "2026-01-01", "--receipts", f.logPath}, 1},
	} {
		if code, _, errOut := runSvc(t, c.args...); code != c.code {
			t.Errorf("svc %v: exit %d, want %d (stderr %s)", c.args, code, c.code, errOut)
		}
	}
	if lines := readLines(t, f.logPath); !slices.Equal(lines, f.lines) {
		t.Fatal("a refused prune changed the log")
	}
}
