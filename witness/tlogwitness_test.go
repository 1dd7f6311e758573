package witness_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// c2spLog is a log signing C2SP checkpoints with a note key.
type c2spLog struct {
	t      *testing.T
	tree   *merkle.Tree
	signer note.Signer
	vkey   string
}

func newC2SPLog(t *testing.T, origin string) *c2spLog {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	return &c2spLog{t: t, tree: tree, signer: s, vkey: vkey}
}

// grow appends leaves up to n and returns the signed checkpoint note.
func (l *c2spLog) grow(n uint64) []byte {
	for l.tree.Size() < n {
		if _, err := l.tree.Append(merkle.LeafHash(fmt.Appendf(nil, "leaf %d", l.tree.Size()))); err != nil {
			l.t.Fatal(err)
		}
	}
	root, _ := l.tree.RootAt(n)
	return l.sign(n, root)
}

func (l *c2spLog) sign(n uint64, root merkle.Hash) []byte {
	signed, err := note.Sign(&note.Note{Text: projections.CheckpointBody(l.signer.Name(), n, root)}, l.signer)
	if err != nil {
		l.t.Fatal(err)
	}
	return signed
}

func (l *c2spLog) proof(old, size uint64) []merkle.Hash {
	if old == 0 {
		return nil
	}
	p, err := l.tree.ConsistencyProof(old, size)
	if err != nil {
		l.t.Fatal(err)
	}
	return p
}

// TestTlogWitnessCosigns: svc's witness speaks C2SP tlog-witness. A log's first
// checkpoint is cosigned (old 0), then each that extends it with a valid proof; the
// answer is a tlog-cosignature/v1 line that golang.org/x/mod/sumdb/note verifies with
// the witness's cosigner key; the log's own client (projections.AddCheckpoint) learns
// the witness's size from a 409. Refusals: an old size that is not the one cosigned
// (409, text/x.tlog.size), a proof that does not verify (422) and a second root at the
// cosigned size (409), both kept as evidence; an unknown origin 404; a checkpoint not
// signed by the log's key 403; a malformed body 400; another method 405.
func TestTlogWitnessCosigns(t *testing.T) {
	key, _ := signer.GenerateKey()
	log := newC2SPLog(t, "example.com/log")
	dir := t.TempDir()
	w, err := witness.NewTlogWitness(witness.TlogConfig{Key: key, Name: "witness.example.com/w1", Logs: []string{log.vkey}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w)
	defer srv.Close()
	cosV, err := witness.NewCosignatureVerifier(w.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	logV, _ := note.NewVerifier(log.vkey)
	ctx := context.Background()
	add := func(old uint64, proof []merkle.Hash, signed []byte) ([]byte, error) {
		return projections.AddCheckpoint(ctx, http.DefaultClient, srv.URL, old, proof, signed)
	}
	cosigned := func(signed, lines []byte) {
		t.Helper()
		n, err := note.Open(append(signed, lines...), note.VerifierList(logV, cosV))
		if err != nil || len(n.Sigs) != 2 {
			t.Fatalf("the cosigned note does not verify with the log's and the witness's keys: %v\n%s%s", err, signed, lines)
		}
	}
	cp5 := log.grow(5)
	lines, err := add(0, nil, cp5)
	if err != nil {
		t.Fatal(err)
	}
	cosigned(cp5, lines)
	cp9 := log.grow(9)
	var conflict *projections.ErrWitnessConflict
	if _, err := add(0, nil, cp9); !errors.As(err, &conflict) || conflict.Size != 5 {
		t.Fatalf("old 0 after 5 was cosigned: %v, want a 409 naming 5", err)
	}
	lines, err = add(5, log.proof(5, 9), cp9)
	if err != nil {
		t.Fatal(err)
	}
	cosigned(cp9, lines)
	if lines, err = add(9, nil, cp9); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	cosigned(cp9, lines)

	cp12 := log.grow(12)
	code, body := post(t, srv.URL, addBody(9, log.proof(5, 12), cp12))
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("a wrong proof: %d %s", code, body)
	}
	forked := log.sign(9, merkle.LeafHash([]byte("fork")))
	if code, body := post(t, srv.URL, addBody(9, nil, forked)); code != http.StatusConflict || !strings.Contains(body, "second root") {
		t.Fatalf("a second root at size 9: %d %s", code, body)
	}
	alarms, _ := filepath.Glob(filepath.Join(dir, "ALARM-*.txt"))
	if len(alarms) != 2 {
		t.Fatalf("%d evidence files, want 2 (bad proof, second root)", len(alarms))
	}
	if data, _ := os.ReadFile(alarms[0]); !strings.Contains(string(data), "example.com/log") {
		t.Fatalf("evidence does not hold the request: %s", data)
	}
	other := newC2SPLog(t, "example.com/other")
	impostor := newC2SPLog(t, "example.com/log") // same origin, another key
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{addBody(0, nil, other.grow(1)), 404, "unknown log origin"},
		{addBody(9, nil, impostor.grow(9)), 403, "no signature"},
		{addBody(13, nil, cp12), 400, "above the checkpoint's size"},
		{"old 01\n\n" + string(cp12), 400, "leading zeros"},
		{"old 9\nnot base64\n\n" + string(cp12), 400, "proof line 1"},
		{"old 9\n" + string(cp12), 400, ""},
		{"old 9\n\n" + strings.Repeat("x", witness.MaxAddCheckpointBody), 413, "over"},
	} {
		if code, body := post(t, srv.URL, c.body); code != c.code || !strings.Contains(body, c.want) {
			t.Fatalf("%q: %d %s, want %d %q", firstLine(c.body), code, body, c.code, c.want)
		}
	}
	resp, err := http.Get(srv.URL + "/add-checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /add-checkpoint: %d", resp.StatusCode)
	}
	// The state survives a new handler (a restart): old 9 is still what it holds.
	w2, err := witness.NewTlogWitness(witness.TlogConfig{Key: key, Name: "witness.example.com/w1", Logs: []string{log.vkey}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(w2)
	defer srv2.Close()
	if _, err := projections.AddCheckpoint(ctx, http.DefaultClient, srv2.URL, 5, log.proof(5, 12), cp12); !errors.As(err, &conflict) || conflict.Size != 9 {
		t.Fatalf("after a restart: %v, want a 409 naming 9", err)
	}
}

func addBody(old uint64, proof []merkle.Hash, signed []byte) string {
	return string(projections.AddCheckpointBody(old, proof, signed))
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/add-checkpoint", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
