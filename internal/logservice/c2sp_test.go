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
func hostedWithRemoteSigner(t *testing.T, witnesses func(*signer.Key) []string) (*Service, string, *signer.Key) {
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
	svc, err := Start(context.Background(), Config{
		DataDir: dir, NATSURL: natsembed.URL(srv, "pw-of-tests"), Signer: sc, Keys: sc.Keys,
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Hosted: &Hosted{Store: st, LeaseTTL: 2 * time.Second},
		Witnesses: witnesses(key),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { hs.Close(); svc.Close(); st.Close() })
	return svc, hs.URL, key
}

// publicTiles reads a tenant's C2SP hash tiles over HTTP with no credential, for
// golang.org/x/mod/sumdb/tlog (whose tile paths carry the height, C2SP's do not).
type publicTiles struct {
	t    *testing.T
	base string
}

func (p publicTiles) Height() int { return 8 }

func (p publicTiles) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tile := range tiles {
		path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		resp, err := http.Get(p.base + "/" + path)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("GET %s without a token: %d %s", path, resp.StatusCode, body)
		}
		out[i] = body
	}
	return out, nil
}

func (publicTiles) SaveTiles([]tlog.Tile, [][]byte) {}

// publicCheckpoint reads a tenant's C2SP checkpoint with no credential and checks that
// it carries a valid signature by each of v's keys.
func publicCheckpoint(t *testing.T, base string, v note.Verifiers) tlog.Tree {
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
	if err != nil || len(n.Sigs) != 2 {
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
// C2SP witness the log sends it to (svc's own). Entry bundles still need the tenant's
// token, until the tenant opts its log public (an audited admin event).
func TestHostedTenantIsAPublicC2SPLog(t *testing.T) {
	var cosV *witness.CosignatureVerifier
	svc, url, key := hostedWithRemoteSigner(t, func(key *signer.Key) []string {
		lvkey, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", key.KeyID(), "acme"), key.Public().Key)
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
	origin := projections.DefaultOrigin("", key.KeyID(), "acme")
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
	thr := tlog.TileHashReader(older, publicTiles{t: t, base: base})
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
	proof, err := tlog.ProveTree(newer.N, older.N, tlog.TileHashReader(newer, publicTiles{t: t, base: base}))
	if err != nil {
		t.Fatalf("consistency proof from the public tiles: %v", err)
	}
	if err := tlog.CheckTree(proof, newer.N, newer.Hash, older.N, older.Hash); err != nil {
		t.Fatalf("the checkpoints are not consistent: %v", err)
	}
	if code, body := get(t, base+"/tile/entries/000"); code != 401 {
		t.Fatalf("an entry bundle without the tenant's token: %d %s", code, body)
	}
	// The tenant opts its log public (an audited admin event): bundles need no token
	// (this hosted log serves none yet: 404 instead of 401).
	if _, err := svc.Admin().SetPublic(context.Background(), "test", "acme", true); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, base+"/tile/entries/000"); code != 404 || !strings.Contains(body, "no entry bundles") {
		t.Fatalf("an entry bundle of a public log without a token: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		code, _, body := testkit.Do(t, http.MethodGet, base+"/audit", tok, "")
		if code != 200 || !strings.Contains(body, `"action":"log.public"`) || !strings.Contains(body, "log made public") {
			return fmt.Errorf("the audit trail lacks log.public: %d %s", code, body)
		}
		return nil
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
