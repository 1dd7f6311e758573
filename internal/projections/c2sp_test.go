package projections

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	flog "github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// c2spWitness is a C2SP tlog-witness built from independent implementations: it
// verifies our signed note with golang.org/x/mod/sumdb/note and parses it with
// transparency-dev/formats, checks the consistency proof with transparency-dev/merkle,
// and cosigns with formats' cosignature/v1 signer.
type c2spWitness struct {
	origin   string
	logV     note.Verifier
	cosigner note.Signer
	mu       sync.Mutex
	size     uint64
	root     []byte
}

func (w *c2spWitness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/add-checkpoint" {
		http.NotFound(rw, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	br := bufio.NewReader(bytes.NewReader(body))
	first, _ := br.ReadString('\n')
	old, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(first), "old "), 10, 64)
	if err != nil {
		http.Error(rw, "bad old line", http.StatusBadRequest)
		return
	}
	var hashes [][]byte
	for {
		line, _ := br.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		h, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			http.Error(rw, "bad proof line", http.StatusBadRequest)
			return
		}
		hashes = append(hashes, h)
	}
	rest, _ := io.ReadAll(br)
	cp, _, _, err := flog.ParseCheckpoint(rest, w.origin, w.logV)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusForbidden)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old != w.size {
		rw.Header().Set("Content-Type", "text/x.tlog.size")
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", w.size)
		return
	}
	if w.size > 0 && cp.Size > w.size {
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, w.size, cp.Size, hashes, w.root, cp.Hash); err != nil {
			http.Error(rw, "inconsistent: "+err.Error(), http.StatusConflict)
			return
		}
	}
	signed, err := note.Sign(&note.Note{Text: string(rest[:bytes.Index(rest, []byte("\n\n"))+1])}, w.cosigner)
	if err != nil {
		http.Error(rw, err.Error(), 500)
		return
	}
	w.size, w.root = cp.Size, cp.Hash
	rw.Write(signed[bytes.Index(signed, []byte("\n\n"))+2:]) // the cosignature line
}

func TestCheckpointNoteCosignedByC2SPWitness(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	origin := DefaultOrigin("log.example.com/acme", "acme")
	ns, err := NewNoteSigner(origin, key)
	if err != nil {
		t.Fatal(err)
	}
	logV, err := note.NewVerifier(ns.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	wskey, wvkey, err := note.GenerateKey(rand.Reader, "witness.example.com")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, err := fnote.NewSignerForCosignatureV1(wskey)
	if err != nil {
		t.Fatal(err)
	}
	cosigV, err := fnote.NewVerifierForCosignatureV1(wvkey)
	if err != nil {
		t.Fatal(err)
	}
	w := &c2spWitness{origin: origin, logV: logV, cosigner: cosigner}
	ws := httptest.NewServer(w)
	defer ws.Close()
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	now := time.Now()
	c := &Checkpointer{Dir: dir, Tenant: "acme", LogID: "log.example.com/acme", Tree: tree, Signer: receipt.KeySigner{Key: key},
		Heartbeat: time.Hour, Now: func() time.Time { return now }, Note: ns, Witnesses: []string{ws.URL}}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	check := func(size uint64) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, "acme", "checkpoint"))
		if err != nil {
			t.Fatal(err)
		}
		// Both the log's signature and the witness's cosignature verify, with
		// independent implementations of the note and checkpoint formats.
		cp, _, n, err := flog.ParseCheckpoint(data, origin, logV, cosigV)
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		if cp.Size != size || !bytes.Equal(cp.Hash, func() []byte { r, _ := tree.RootAt(size); return r[:] }()) || len(n.Sigs) != 2 {
			t.Fatalf("checkpoint %+v with %d signatures, want size %d and 2", cp, len(n.Sigs), size)
		}
	}
	for _, l := range []string{"a", "b"} {
		tree.Append(merkle.LeafHash([]byte(l)))
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(2)
	for _, l := range []string{"c", "d", "e"} {
		tree.Append(merkle.LeafHash([]byte(l)))
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(5) // the witness checked a consistency proof 2 → 5
	// A log that forgot what the witness holds learns it from the 409 and proves from there.
	c.witnessed[ws.URL] = 0
	tree.Append(merkle.LeafHash([]byte("f")))
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(6)
	if w.size != 6 {
		t.Fatalf("witness holds size %d", w.size)
	}
}
