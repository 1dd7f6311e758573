package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
	"svc.dev/svc/witness"
)

// TestKeyRotationKeepsTheWitness: a tenant's C2SP origin names no key
// (svc-log/<tenant>), so a rotation of the log key keeps the log's identity, and a
// C2SP witness (svc's own, whose state is per origin, as C2SP tlog-witness says) goes
// on proving that the new key's checkpoints extend what it cosigned under the old.
// The log signs through the signer service; the signer's state and the witness's
// state directory outlive their restarts. Under key 1 the witness cosigns sizes 3
// and 5. After the rotation (the signer holds key 2, key 1 retired), a witness that
// trusts key 1 only refuses the checkpoint with 403 (it verifies no signature by a
// key it trusts) and keeps its state; once its operator adds key 2 under the same
// origin, it cosigns the next checkpoint with a proof from size 5, the size it held,
// and a second history at the size it cosigned is refused even under the new key.
func TestKeyRotationKeepsTheWitness(t *testing.T) {
	k1, _ := signer.GenerateKey()
	k2, _ := signer.GenerateKey()
	wk, _ := signer.GenerateKey()
	headsDir, logDir, witnessDir := t.TempDir(), t.TempDir(), t.TempDir()
	origin := projections.DefaultOrigin("", "acme")
	if origin != "svc-log/acme" {
		t.Fatalf("default origin %q, want svc-log/acme (no key id)", origin)
	}
	vk1, _ := note.NewEd25519VerifierKey(origin, k1.Public().Key)
	vk2, _ := note.NewEd25519VerifierKey(origin, k2.Public().Key)
	const token = "rotation-test-signer-token"
	startSigner := func(t *testing.T, key *signer.Key, retired ...remote.RetiredKey) *remote.Client {
		heads, err := remote.OpenHeadStore(headsDir)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := remote.NewServer(remote.ServerConfig{Key: key, Token: token, ValidFrom: time.Now().Add(-time.Minute),
			Retired: retired, Heads: heads, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		c, err := remote.NewClient(context.Background(), hs.URL, token)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var cosV *witness.CosignatureVerifier
	startWitness := func(t *testing.T, logs ...string) string {
		tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wk, Name: "w.example.com/rotation", Logs: logs, Dir: witnessDir})
		if err != nil {
			t.Fatal(err)
		}
		if cosV, err = witness.NewCosignatureVerifier(tw.VerifierKey()); err != nil {
			t.Fatal(err)
		}
		ws := httptest.NewServer(tw)
		t.Cleanup(ws.Close)
		return ws.URL
	}
	startLog := func(t *testing.T, key *signer.Key, c *remote.Client, w string) *logtest.Log {
		return logtest.Start(t, logtest.Options{Key: key, Signer: c, Dir: logDir, Witnesses: []string{w},
			Tenants: []logtest.Tenant{{ID: "acme", Token: "tok"}}})
	}
	// checkpoint publishes one and returns it with the keys that verify it.
	checkpoint := func(t *testing.T, l *logtest.Log, n int, keys ...string) (size int64, sigs int) {
		t.Helper()
		l.Grow(t, "acme", "rotation", n)
		l.Checkpoint(t, "acme")
		resp, err := http.Get(l.Base("acme") + "/checkpoint")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var vs []note.Verifier
		for _, k := range keys {
			v, _ := note.NewVerifier(k)
			vs = append(vs, v)
		}
		nt, err := note.Open(body, note.VerifierList(append(vs, cosV)...))
		if err != nil || !strings.HasPrefix(nt.Text, origin+"\n") {
			t.Fatalf("the checkpoint does not verify under origin %s: %v\n%s", origin, err, body)
		}
		sz, _, err := witness.ParseCheckpointBody(nt.Text)
		if err != nil {
			t.Fatal(err)
		}
		return int64(sz), len(nt.Sigs)
	}

	t.Run("key 1", func(t *testing.T) {
		l := startLog(t, k1, startSigner(t, k1), startWitness(t, vk1))
		for _, n := range []int{3, 2} {
			if size, sigs := checkpoint(t, l, n, vk1); sigs != 2 {
				t.Fatalf("size %d under key 1: %d verified signatures, want the log's and the witness's", size, sigs)
			}
		}
	})
	retired := remote.RetiredKey{Key: k1.Public(), ValidFrom: time.Now().Add(-time.Hour), ValidTo: time.Now().Add(-time.Minute)}
	t.Run("key 2, the witness trusts key 1 only", func(t *testing.T) {
		c := startSigner(t, k2, retired)
		w := startWitness(t, vk1)
		l := startLog(t, k2, c, w)
		if size, sigs := checkpoint(t, l, 2, vk2); size != 7 || sigs != 1 {
			t.Fatalf("size %d under key 2 with a witness that knows key 1 only: %d verified signatures, want 1 (the log's; no cosignature)", size, sigs)
		}
		ns, _ := c.NewNoteSigner(origin, "acme", l.Service.Checkpointer("acme").Tree)
		tree := l.Service.Checkpointer("acme").Tree
		root, _ := tree.RootAt(7)
		signed, err := ns.SignCheckpoint(context.Background(), 7, root)
		if err != nil {
			t.Fatal(err)
		}
		code, body := postAdd(t, w, projections.AddCheckpointBody(5, mustProof(t, tree, 5, 7), signed))
		if code != http.StatusForbidden {
			t.Fatalf("the witness that trusts key 1 only: %d %s, want 403", code, body)
		}
	})
	t.Run("key 2, the witness told", func(t *testing.T) {
		c := startSigner(t, k2, retired)
		w := startWitness(t, vk1, vk2)
		l := startLog(t, k2, c, w)
		if size, sigs := checkpoint(t, l, 4, vk2); size != 11 || sigs != 2 {
			t.Fatalf("size %d under key 2, the witness told: %d verified signatures, want the log's and the witness's", size, sigs)
		}
		// The witness held size 5 from key 1's checkpoints and proved 11 from it: a
		// second history at 11, signed by key 2, is refused.
		fork, _ := merkle.NewTree(merkle.NewMemoryStore())
		for i := range 11 {
			_, _ = fork.Append(merkle.LeafHash([]byte{byte(i), 'f'}))
		}
		froot, _ := fork.RootAt(11)
		s2, _ := signer.NewNoteSigner(origin, k2)
		forked, _ := note.Sign(&note.Note{Text: projections.CheckpointBody(origin, 11, froot)}, s2)
		if code, body := postAdd(t, w, projections.AddCheckpointBody(11, nil, forked)); code != http.StatusConflict {
			t.Fatalf("a second root at the cosigned size under key 2: %d %s, want 409", code, body)
		}
	})
}

func postAdd(t *testing.T, base string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/add-checkpoint", "text/plain", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func mustProof(t *testing.T, tree *merkle.Tree, from, to uint64) []merkle.Hash {
	t.Helper()
	p, err := tree.ConsistencyProof(from, to)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
