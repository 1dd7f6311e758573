package logservice

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
	"svc.dev/svc/witness"
)

// hostedWithRemoteSigner starts a database-backed process whose log key lives in a
// signer service (as svc log --db-env runs), with the C2SP witnesses witnesses(key)
// names, and returns it with its URL.
func hostedWithRemoteSigner(t *testing.T, witnesses func(*signer.Key) []string, opts ...func(*Config)) (*Service, string, *signer.Key) {
	t.Helper()
	srv, dbURL, key := hostedParts(t)
	heads, err := remote.OpenHeadStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const token = "signer-token-of-the-c2sp-test"
	ss, err := remote.NewServer(remote.ServerConfig{Key: key, Token: token, ValidFrom: time.Now().Add(-time.Hour), Heads: heads, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sh := httptest.NewServer(ss)
	t.Cleanup(sh.Close)
	sc, err := remote.NewClient(context.Background(), sh.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{
		DataDir: dir, NATSURL: natsembed.URL(srv, "pw-of-tests"), Signer: sc, Keys: sc.Keys,
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Hosted: &Hosted{Store: st, LeaseTTL: 2 * time.Second},
		Witnesses: witnesses(key),
	}
	svc, url := startServed(t, cfg, opts...)
	return svc, url, key
}

// publicCheckpoint reads a tenant's C2SP checkpoint with no credential and checks that
// it carries a valid signature by each of v's keys.
func publicCheckpoint(t *testing.T, base string, v note.Verifiers) tlog.Tree {
	t.Helper()
	return publicCheckpointOf(t, base, v, 2)
}

// publicCheckpointOf is publicCheckpoint for a checkpoint with sigs signatures v
// verifies.
func publicCheckpointOf(t *testing.T, base string, v note.Verifiers, sigs int) tlog.Tree {
	t.Helper()
	resp, err := http.Get(base + "/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /checkpoint without a token: %d %s", resp.StatusCode, body)
	}
	n, err := note.Open(body, v)
	if err != nil || len(n.Sigs) != sigs {
		t.Fatalf("the checkpoint does not verify with the log's and the witness's keys: %v\n%s", err, body)
	}
	// tlog.ParseTree wants the go.sum database's origin; a C2SP checkpoint's body
	// has the same two lines after its own.
	lines := strings.Split(n.Text, "\n")
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || len(lines) != 4 {
		t.Fatalf("the checkpoint is not origin, size, root: %q", n.Text)
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		t.Fatalf("the checkpoint's root is not a base64 hash: %q", lines[2])
	}
	return tlog.Tree{N: size, Hash: tlog.Hash(root)}
}

// TestHostedTenantIsAPublicC2SPLog: a hosted tenant (database mode, log key in the
// signer service) publishes C2SP signed-note checkpoints signed through the signer,
// and an independent client (golang.org/x/mod/sumdb/tlog and note), with no
// credential, reads its checkpoint and hash tiles and proves a leaf's inclusion and
// the consistency of two checkpoints; each checkpoint carries the cosignature of the
// C2SP witness the log sends it to (svc's own). Entry bundles (read from SVC_LEAVES)
// need the tenant's token, until the tenant opts its log public (an audited admin
// event); then the same client reads them with no credential and checks each entry
// against the authenticated hash tiles.
func TestHostedTenantIsAPublicC2SPLog(t *testing.T) {
	var cosV *witness.CosignatureVerifier
	svc, url, key := hostedWithRemoteSigner(t, func(key *signer.Key) []string {
		lvkey, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", "acme"), key.Public().Key)
		wkey, _ := signer.GenerateKey()
		tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wkey, Name: "w.example.com/hosted", Logs: []string{lvkey}, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if cosV, err = witness.NewCosignatureVerifier(tw.VerifierKey()); err != nil {
			t.Fatal(err)
		}
		ws := httptest.NewServer(tw)
		t.Cleanup(ws.Close)
		return []string{ws.URL}
	})
	tok := addTenant(t, svc, "acme")
	base := url + "/t/acme"
	if code, body := get(t, base+"/checkpoint"); code != 404 || !strings.Contains(body, "no checkpoint published yet") {
		t.Fatalf("before any checkpoint: %d %s", code, body)
	}
	var leaves []string
	appendN := func(n int) {
		for range n {
			leaf := fmt.Sprintf("leaf %d of acme", len(leaves))
			code, body := appendTo(t, url, "acme", tok, leaf)
			for code == http.StatusTooManyRequests { // the per-token rate limit
				time.Sleep(50 * time.Millisecond)
				code, body = appendTo(t, url, "acme", tok, leaf)
			}
			if code != 200 {
				t.Fatalf("append: %d %s", code, body)
			}
			leaves = append(leaves, leaf)
		}
		if err := svc.Checkpointer("acme").Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	origin := projections.DefaultOrigin("", "acme")
	vkey, err := note.NewEd25519VerifierKey(origin, key.Public().Key)
	if err != nil {
		t.Fatal(err)
	}
	lv, _ := note.NewVerifier(vkey)
	v := note.VerifierList(lv, cosV) // the log's signature and the witness's cosignature
	appendN(300)                     // more than a full tile: level 1 is read too
	older := publicCheckpoint(t, base, v)
	if older.N != 300 {
		t.Fatalf("checkpoint of size %d, want 300", older.N)
	}
	thr := tlog.TileHashReader(older, testkit.C2SPTiles{T: t, Base: base})
	for _, i := range []int64{0, 255, 256, 299} {
		proof, err := tlog.ProveRecord(older.N, i, thr)
		if err != nil {
			t.Fatalf("inclusion proof of leaf %d from the public tiles: %v", i, err)
		}
		if err := tlog.CheckRecord(proof, older.N, older.Hash, i, tlog.RecordHash([]byte(leaves[i]))); err != nil {
			t.Fatalf("leaf %d is not included: %v", i, err)
		}
	}
	appendN(45)
	newer := publicCheckpoint(t, base, v)
	if newer.N != 345 {
		t.Fatalf("second checkpoint of size %d, want 345", newer.N)
	}
	proof, err := tlog.ProveTree(newer.N, older.N, tlog.TileHashReader(newer, testkit.C2SPTiles{T: t, Base: base}))
	if err != nil {
		t.Fatalf("consistency proof from the public tiles: %v", err)
	}
	if err := tlog.CheckTree(proof, newer.N, newer.Hash, older.N, older.Hash); err != nil {
		t.Fatalf("the checkpoints are not consistent: %v", err)
	}
	// Entry bundles are the tenant's: its token reads them, and no token, a wrong one
	// or another tenant's gets 401 before the tenant is looked up or started.
	other := addTenant(t, svc, "globex")
	addTenant(t, svc, "beta") // never used: it stays unstarted
	for _, c := range []struct{ base, token string }{{base, ""}, {base, "not-a-token"}, {base, other}, {url + "/t/beta", ""}, {url + "/t/beta", tok}} {
		if code, _, body := testkit.Do(t, http.MethodGet, c.base+"/tile/entries/000", c.token, ""); code != 401 {
			t.Fatalf("GET %s/tile/entries/000 with token %q: %d %s, want 401", c.base, c.token, code, body)
		}
	}
	svc.hosted.mu.Lock()
	started := svc.hosted.held["beta"] != nil || svc.hosted.follows["beta"] != nil
	svc.hosted.mu.Unlock()
	if started {
		t.Fatal("a refused entry-bundle read started the tenant")
	}
	checkBundles(t, base, tok, newer, leaves)
	if code, _, body := testkit.Do(t, http.MethodGet, base+"/tile/entries/001.p/90", tok, ""); code != 404 || !strings.Contains(body, "not all committed yet") {
		t.Fatalf("a bundle past the log's size: %d %s", code, body)
	}
	// The tenant opts its log public (an audited admin event): an independent client
	// reads its bundles with no credential.
	if _, err := svc.Admin().SetPublic(context.Background(), "test", "acme", true); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if code, body := get(t, base+"/tile/entries/000"); code != 200 {
			return fmt.Errorf("an entry bundle of a public log without a token: %d %s", code, body)
		}
		return nil
	})
	checkBundles(t, base, "", newer, leaves)
	if code, body := get(t, url+"/t/globex/tile/entries/000"); code != 401 {
		t.Fatalf("another (private) tenant's bundle without a token: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		code, _, body := testkit.Do(t, http.MethodGet, base+"/audit", tok, "")
		if code != 200 || !strings.Contains(body, `"action":"log.public"`) || !strings.Contains(body, "log made public") {
			return fmt.Errorf("the audit trail lacks log.public: %d %s", code, body)
		}
		return nil
	})
}

// get is a GET's status and body (testkit.Do without a token).
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	code, _, body := testkit.Do(t, http.MethodGet, url, "", "")
	return code, body
}

// checkBundles reads every entry bundle of tree (full and partial, with token, or
// none when it is empty) as golang.org/x/mod/sumdb/tlog names them, and checks each
// entry against the leaf appended and against its record hash in the public hash
// tiles, which tlog authenticates against tree's root.
func checkBundles(t *testing.T, base, token string, tree tlog.Tree, leaves []string) {
	t.Helper()
	thr := tlog.TileHashReader(tree, testkit.C2SPTiles{T: t, Base: base})
	for n := int64(0); n*256 < tree.N; n++ {
		tile := tlog.Tile{H: 8, L: -1, N: n, W: int(min(256, tree.N-n*256))}
		path := strings.Replace(tile.Path(), "tile/8/data/", "tile/entries/", 1)
		code, _, body := testkit.Do(t, http.MethodGet, base+"/"+path, token, "")
		if code != 200 {
			t.Fatalf("GET %s (token %q): %d %s", path, token, code, body)
		}
		b := []byte(body)
		for j := range tile.W {
			k := n*256 + int64(j)
			if len(b) < 2 {
				t.Fatalf("%s ends before entry %d", path, j)
			}
			l := int(b[0])<<8 | int(b[1])
			if len(b) < 2+l {
				t.Fatalf("%s ends inside entry %d", path, j)
			}
			entry := b[2 : 2+l]
			b = b[2+l:]
			if string(entry) != leaves[k] {
				t.Fatalf("%s entry %d is %q, want %q", path, j, entry, leaves[k])
			}
			hashes, err := thr.ReadHashes([]int64{tlog.StoredHashIndex(0, k)})
			if err != nil {
				t.Fatalf("leaf hash %d from the public tiles: %v", k, err)
			}
			if hashes[0] != tlog.RecordHash(entry) {
				t.Fatalf("%s entry %d does not hash to leaf %d of the hash tiles", path, j, k)
			}
		}
		if len(b) != 0 {
			t.Fatalf("%s holds %d bytes past its %d entries", path, len(b), tile.W)
		}
	}
}
