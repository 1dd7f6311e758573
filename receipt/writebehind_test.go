package receipt_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// writeBehindEnv is an issuer that writes bundle files behind its calls.
func writeBehindEnv(t *testing.T) *issuerEnv {
	t.Helper()
	e := newIssuerEnv(t, receipt.KindSDK, func(c *receipt.IssuerConfig) { c.WriteBehind = true })
	t.Cleanup(func() { e.is.Close() }) // before the log closes
	return e
}

// reopen closes the issuer and its log and opens both again on the same files, as
// a restart does (with recovery of lost bundle files).
func (e *issuerEnv) reopen(t *testing.T) {
	t.Helper()
	e.is.Close()
	e.log.Close()
	l, err := receipt.OpenFileLog(e.path, e.key, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: e.key, Kind: receipt.KindSDK, Log: l, ReceiptsDir: e.dir, WriteBehind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Close() })
	e.log, e.is = l, is
}

// checkBundleFiles requires a whole, verifiable bundle file for every leaf of the log,
// holding that leaf at that index.
func checkBundleFiles(t *testing.T, e *issuerEnv) {
	t.Helper()
	f := e.log.File()
	for i := uint64(0); i < f.Size(); i++ {
		entry, err := f.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		env, err := receipt.ParseEnvelope([]byte(entry.Leaf))
		if err != nil {
			t.Fatalf("leaf %d: %v", i, err)
		}
		st, _ := receipt.DecodeStatement(env)
		name := strings.TrimPrefix(st.Subject[0].Name, "tool-call:search:") + ".json"
		if st.PredicateType == receipt.PredicateAuthorization {
			name = strings.TrimSuffix(name, ".json") + ".authorization.json"
		}
		b := readBundle(t, filepath.Join(e.dir, name))
		if b.Inclusion.LeafIndex != i || !bytes.Equal(b.Envelope.Canonical(), []byte(entry.Leaf)) {
			t.Fatalf("%s: leaf %d in the file, %d in the log, or another envelope", name, b.Inclusion.LeafIndex, i)
		}
		checkProof(t, b, []signer.PublicKey{e.key.Public()})
	}
}

func readMarkFile(t *testing.T, dir string) (logFile string, below uint64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, receipt.MarkFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		LogFile      string `json:"logFile"`
		DurableBelow uint64 `json:"durableBelow"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m.LogFile, m.DurableBelow
}

func TestWriteBehindWritesEveryBundle(t *testing.T) {
	e := writeBehindEnv(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				p, err := e.is.Begin(sdkCall(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					if err := e.is.Authorize(context.Background(), p); err != nil {
						t.Error(err)
						return
					}
				}
				b, err := e.is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"ok":true}`), Provenance: receipt.Observed})
				if err != nil {
					t.Error(err)
					return
				}
				// Concurrent calls share a commit: the proof is against the head
				// at the end of the batch that held the leaf.
				if b.Inclusion.TreeSize <= b.Inclusion.LeafIndex || b.Inclusion.TreeSize > e.log.File().Size() {
					t.Errorf("proof at size %d for leaf %d (log size %d)", b.Inclusion.TreeSize, b.Inclusion.LeafIndex, e.log.File().Size())
				}
			}
		})
	}
	wg.Wait()
	if err := e.is.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := e.log.File().Size(); got != 8*25+8*5 {
		t.Fatalf("log size %d, want %d", got, 8*25+8*5)
	}
	if n := len(receiptFiles(t, e.dir)); n != 8*25+8*5 {
		t.Fatalf("%d files in the receipts directory, want %d: %v", n, 8*25+8*5, receiptFiles(t, e.dir))
	}
	checkBundleFiles(t, e)
	logFile, below := readMarkFile(t, e.dir)
	if abs, _ := filepath.Abs(e.path); logFile != abs || below != e.log.File().Size() {
		t.Fatalf("mark %s %d, want %s %d", logFile, below, abs, e.log.File().Size())
	}
	// Closed: the issuer refuses, and nothing reaches the log.
	e.is.Close()
	p, _ := e.is.Begin(sdkCall(`{}`))
	if _, err := e.is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Observed}); err == nil {
		t.Fatal("Finish after Close succeeded")
	}
	if got := e.log.File().Size(); got != 8*25+8*5 {
		t.Fatalf("log grew to %d after Close", got)
	}
}

func issueN(t *testing.T, e *issuerEnv, n int) []*receipt.Bundle {
	t.Helper()
	var out []*receipt.Bundle
	for i := range n {
		out = append(out, e.issue(t, sdkCall(fmt.Sprintf(`{"i":%d}`, i)), receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Observed}))
	}
	return out
}

func bundleName(t *testing.T, b *receipt.Bundle) string {
	t.Helper()
	st, err := receipt.DecodeStatement(b.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(st.Subject[0].Name, "tool-call:search:") + ".json"
}

// TestWriteBehindRebuildsLostFiles: what a crash can do to files written without
// fsync (gone, empty, torn) is repaired at the next start for every leaf at or after
// the mark, from the log; leaves of other keys and other kinds are left alone.
func TestWriteBehindRebuildsLostFiles(t *testing.T) {
	e := writeBehindEnv(t)
	bs := issueN(t, e, 20)
	// Lines that are not this issuer's receipts: another key's, a hash-only leaf, and
	// this key's statement whose receipt id would name a file outside the directory.
	other := testKey(t, 9)
	foreign := receipt.Sign(receipt.PayloadInToto, []byte(`{"predicateType":"x"}`), other)
	if _, err := e.log.Append(context.Background(), foreign.Canonical()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.File().AppendHash(merkle.LeafHash([]byte("elsewhere"))); err != nil {
		t.Fatal(err)
	}
	evil, _ := receipt.SignJSON(receipt.PayloadInToto, receipt.Statement{Type: receipt.StatementType, PredicateType: receipt.PredicateReceipt,
		Subject: []receipt.Subject{{Name: "tool-call:x:../evil", Digest: map[string]string{"sha256": "00"}}}, Predicate: json.RawMessage(`{"receiptId":"../evil"}`)}, e.key)
	if _, err := e.log.Append(context.Background(), evil.Canonical()); err != nil {
		t.Fatal(err)
	}
	bs = append(bs, issueN(t, e, 5)...)
	if err := e.is.Flush(); err != nil {
		t.Fatal(err)
	}
	e.is.Close()

	// A crash after the writer synced leaves 0..9 and before it synced the rest.
	root10, err := e.log.File().Tree().RootAt(10)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, receipt.MarkFile), fmt.Appendf(nil, `{"logFile":%q,"durableBelow":10,"root":%q}`, mustAbs(t, e.path), root10), 0o644); err != nil {
		t.Fatal(err)
	}
	gone, empty, torn := bundleName(t, bs[12]), bundleName(t, bs[15]), bundleName(t, bs[22])
	os.Remove(filepath.Join(e.dir, gone))
	os.WriteFile(filepath.Join(e.dir, empty), nil, 0o644)
	data, _ := os.ReadFile(filepath.Join(e.dir, torn))
	os.WriteFile(filepath.Join(e.dir, torn), data[:len(data)/2], 0o644)
	// Below the mark a file is trusted as durable: its loss is not a crash's doing.
	below := bundleName(t, bs[3])
	os.Remove(filepath.Join(e.dir, below))
	before := map[string][]byte{}
	for _, n := range listDir(t, e.dir) {
		before[n], _ = os.ReadFile(filepath.Join(e.dir, n))
	}

	e.reopen(t)
	for _, n := range []string{gone, empty, torn} {
		b := readBundle(t, filepath.Join(e.dir, n))
		checkProof(t, b, []signer.PublicKey{e.key.Public()})
		if b.Inclusion.TreeSize != e.log.File().Size() {
			t.Fatalf("%s rebuilt with a proof at size %d, want the log's %d", n, b.Inclusion.TreeSize, e.log.File().Size())
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, below)); !os.IsNotExist(err) {
		t.Fatalf("a file below the mark was rewritten: %v", err)
	}
	for n, data := range before { // intact files are left as they were
		if n == receipt.MarkFile || n == empty || n == torn {
			continue
		}
		if now, _ := os.ReadFile(filepath.Join(e.dir, n)); !bytes.Equal(now, data) {
			t.Fatalf("%s was rewritten", n)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dir), "evil.json")); !os.IsNotExist(err) {
		t.Fatal("a receipt id naming a path outside the directory was written")
	}
	if _, below := readMarkFile(t, e.dir); below != e.log.File().Size() {
		t.Fatalf("mark %d after recovery, want %d", below, e.log.File().Size())
	}

	// Without a mark (or with a damaged one) every leaf is checked.
	os.WriteFile(filepath.Join(e.dir, receipt.MarkFile), []byte("{not json"), 0o644)
	e.reopen(t)
	if _, err := os.Stat(filepath.Join(e.dir, below)); err != nil {
		t.Fatalf("with a damaged mark the file below it was not rebuilt: %v", err)
	}
	if n := len(receiptFiles(t, e.dir)); n != 25 {
		t.Fatalf("%d files, want 25: %v", n, receiptFiles(t, e.dir))
	}
}

// receiptFiles lists dir without the mark file.
func receiptFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range listDir(t, dir) {
		if n != receipt.MarkFile {
			out = append(out, n)
		}
	}
	return out
}

// TestWriteBehindMarkOfARecreatedLog: a log recreated at the same path does not match
// the mark the old one left (its root at the mark differs), so every leaf is checked.
func TestWriteBehindMarkOfARecreatedLog(t *testing.T) {
	e := writeBehindEnv(t)
	issueN(t, e, 6)
	if err := e.is.Close(); err != nil {
		t.Fatal(err)
	}
	e.log.Close()
	os.Remove(e.path)
	for _, n := range receiptFiles(t, e.dir) {
		os.Remove(filepath.Join(e.dir, n))
	}
	l, err := receipt.OpenFileLog(e.path, e.key, "")
	if err != nil {
		t.Fatal(err)
	}
	e.log = l
	t.Cleanup(func() { l.Close() })
	e.is, err = receipt.NewIssuer(receipt.IssuerConfig{Key: e.key, Kind: receipt.KindSDK, Log: l, ReceiptsDir: e.dir, WriteBehind: true})
	if err != nil {
		t.Fatal(err)
	}
	bs := issueN(t, e, 8) // a new history: leaves 0..7, none with a file yet
	e.is.Close()
	// A crash before the writer synced: the files are gone, the old mark (6) is back.
	for _, n := range receiptFiles(t, e.dir) {
		os.Remove(filepath.Join(e.dir, n))
	}
	old := fmt.Appendf(nil, `{"logFile":%q,"durableBelow":6,"root":%q}`, mustAbs(t, e.path), strings.Repeat("ab", 32))
	os.WriteFile(filepath.Join(e.dir, receipt.MarkFile), old, 0o644)
	e.reopen(t)
	for _, b := range bs {
		readBundle(t, filepath.Join(e.dir, bundleName(t, b)))
	}
}

// TestWriteBehindFailedWriteIsReportedAndRetried: Flush reports a file that could not
// be written; the writer retries it, and the mark stays below its leaf until it is.
func TestWriteBehindFailedWriteIsReportedAndRetried(t *testing.T) {
	e := newIssuerEnv(t, receipt.KindSDK, func(c *receipt.IssuerConfig) {
		c.WriteBehind = true
		c.NewID = func() string { return "fixed" }
	})
	t.Cleanup(func() { e.is.Close() })
	blocker := filepath.Join(e.dir, "fixed.json")
	if err := os.Mkdir(blocker, 0o755); err != nil { // a directory where the file must go
		t.Fatal(err)
	}
	p, _ := e.is.Begin(sdkCall(`{}`))
	if _, err := e.is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Observed}); err != nil {
		t.Fatal(err)
	}
	if err := e.is.Flush(); err == nil {
		t.Fatal("Flush reported no error for a file it could not write")
	}
	if _, err := os.Stat(filepath.Join(e.dir, receipt.MarkFile)); err == nil {
		if _, below := readMarkFile(t, e.dir); below != 0 {
			t.Fatalf("mark %d moved past the unwritten leaf 0", below)
		}
	}
	os.Remove(blocker)
	if err := e.is.Flush(); err != nil { // the retry succeeds
		t.Fatal(err)
	}
	readBundle(t, blocker)
	if _, below := readMarkFile(t, e.dir); below != 1 {
		t.Fatalf("mark %d after the retry, want 1", below)
	}
}

// TestWriteBehindCloseDuringCalls: Close waits for the calls in progress, so every
// Finish that succeeded has its file when Close returns, and later calls are refused.
func TestWriteBehindCloseDuringCalls(t *testing.T) {
	for round := range 5 {
		e := writeBehindEnv(t)
		var mu sync.Mutex
		var written []*receipt.Bundle
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					p, _ := e.is.Begin(sdkCall(fmt.Sprintf(`{"i":%d}`, i)))
					b, err := e.is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Observed})
					if err != nil {
						return // closed
					}
					mu.Lock()
					written = append(written, b)
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(10+round*7) * time.Millisecond)
		if err := e.is.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, b := range written {
			if _, err := os.Stat(filepath.Join(e.dir, bundleName(t, b))); err != nil {
				t.Fatalf("round %d: a Finish that succeeded has no file after Close: %v", round, err)
			}
		}
	}
}

// TestIssuerRefusesIDsThatAreNotFileNames: receipt ids name files.
func TestIssuerRefusesIDsThatAreNotFileNames(t *testing.T) {
	for _, id := range []string{"", "../x", "a/b", ".hidden", "call.1", strings.Repeat("a", 129)} {
		e := newIssuerEnv(t, receipt.KindSDK, func(c *receipt.IssuerConfig) { c.NewID = func() string { return id } })
		if _, err := e.is.Begin(sdkCall(`{}`)); err == nil {
			t.Fatalf("receipt id %q accepted", id)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestWriteBehindSurvivesKill kills a process issuing receipts with SIGKILL, at no
// particular point, and requires at the next start a verifiable bundle file for every
// receipt the process had handed out (printed) and for every leaf in its log.
func TestWriteBehindSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), writeBehindHelperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	handedOut := map[string]uint64{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(handedOut) < 300 {
		id, idx, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(idx, 10, 64)
		if !ok || err != nil {
			t.Fatalf("helper printed %q", sc.Text())
		}
		handedOut[id] = n
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(handedOut) < 300 {
		t.Fatalf("the helper handed out %d receipts before it stopped", len(handedOut))
	}

	e := &issuerEnv{key: testKey(t, 1), dir: filepath.Join(dir, "receipts"), path: filepath.Join(dir, "log.jsonl")}
	l, err := receipt.OpenFileLog(e.path, e.key, "")
	if err != nil {
		t.Fatal(err)
	}
	e.log = l
	t.Cleanup(func() { l.Close() })
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: e.key, Kind: receipt.KindSDK, Log: l, ReceiptsDir: e.dir, WriteBehind: true})
	if err != nil {
		t.Fatal(err)
	}
	e.is = is
	t.Cleanup(func() { is.Close() })
	for id, idx := range handedOut {
		b := readBundle(t, filepath.Join(e.dir, id+".json"))
		if b.Inclusion.LeafIndex != idx {
			t.Fatalf("receipt %s handed out at leaf %d, its file says %d", id, idx, b.Inclusion.LeafIndex)
		}
	}
	checkBundleFiles(t, e)
	t.Logf("%d receipts handed out before the kill, %d leaves in the log", len(handedOut), l.File().Size())
}

const writeBehindHelperEnv = "SVC_TEST_WRITE_BEHIND_HELPER"

// writeBehindHelper issues receipts until it is killed, printing "<id> <leaf index>"
// for each one Finish returned.
func writeBehindHelper(dir string) {
	key, _ := signer.KeyFromSeed(bytes.Repeat([]byte{1}, 32))
	l, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), key, "")
	if err != nil {
		panic(err)
	}
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: key, Kind: receipt.KindSDK, Log: l, ReceiptsDir: filepath.Join(dir, "receipts"), WriteBehind: true})
	if err != nil {
		panic(err)
	}
	// Four callers at once, so that the kill also lands in group commits shared by
	// several of them.
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for c := range 4 {
		go func() {
			for i := 0; ; i++ {
				p, err := is.Begin(sdkCall(fmt.Sprintf(`{"c":%d,"i":%d}`, c, i)))
				if err != nil {
					panic(err)
				}
				b, err := is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Observed})
				if err != nil {
					panic(err)
				}
				mu.Lock()
				fmt.Fprintf(w, "%s %d\n", p.ReceiptID, b.Inclusion.LeafIndex)
				w.Flush()
				mu.Unlock()
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // let the kill land anywhere
				}
			}
		}()
	}
	select {}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(writeBehindHelperEnv); dir != "" {
		writeBehindHelper(dir)
		return
	}
	os.Exit(m.Run())
}
