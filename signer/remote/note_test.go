package remote_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer/remote"
)

// TestSignerSignsCheckpointNotes: the log signs C2SP checkpoints through the signer;
// each note verifies with golang.org/x/mod/sumdb/note against the origin's verifier
// key; checkpoints of an origin only extend (a smaller one, and another root at a
// signed size, are refused with 409); a tree head's chain and a checkpoint's are apart;
// a text that is not a three-line checkpoint is refused with 400 naming why.
func TestSignerSignsCheckpointNotes(t *testing.T) {
	s := newSigner(t, 7, testToken, nil)
	c := newClient(t, s.http.URL, testToken)
	tree := growTree(t, nil, "a", 5)
	ns, err := c.NewNoteSigner("example.com/log", "acme", tree)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(ns.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, size := range []uint64{3, 5, 5} {
		growTree(t, tree, "a", int(size))
		root, _ := tree.RootAt(size)
		signed, err := ns.SignCheckpoint(ctx, size, root)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		n, err := note.Open(signed, note.VerifierList(v))
		if err != nil {
			t.Fatalf("size %d: the note does not verify: %v\n%s", size, err, signed)
		}
		want := fmt.Sprintf("example.com/log\n%d\n%s\n", size, base64.StdEncoding.EncodeToString(root[:]))
		if n.Text != want {
			t.Fatalf("note text %q, want %q", n.Text, want)
		}
	}
	// Another client (a restarted process) signs a larger one: the 409 names size 5
	// and it proves from there.
	growTree(t, tree, "a", 9)
	ns2, _ := newClient(t, s.http.URL, testToken).NewNoteSigner("example.com/log", "acme", tree)
	root9, _ := tree.RootAt(9)
	if _, err := ns2.SignCheckpoint(ctx, 9, root9); err != nil {
		t.Fatalf("a second client could not extend the checkpoints: %v", err)
	}
	root5, _ := tree.RootAt(5)
	if _, err := ns2.SignCheckpoint(ctx, 5, root5); !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("a smaller checkpoint: %v, want ErrConflict", err)
	}
	other := growTree(t, nil, "b", 9)
	rootB, _ := other.RootAt(9)
	if _, err := ns2.SignCheckpoint(ctx, 9, rootB); !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("another root at size 9: %v, want ErrConflict", err)
	}
	// The tree heads of tenant acme are a chain of their own: its first head is signed.
	if code, body := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(headBody(t, tree, 2, 0, "svc-log/acme"))); code != http.StatusOK {
		t.Fatalf("first tree head after checkpoints: %d %s", code, body)
	}
	for _, tc := range []struct{ text, want string }{
		{"example.com/log\n5\n" + base64.StdEncoding.EncodeToString(root5[:]) + "\nextension\n", "exactly three lines"},
		{"DSSEv1 1 a\n5\n" + base64.StdEncoding.EncodeToString(root5[:]) + "\n", "DSSEv1"},
		{"o\n05\n" + base64.StdEncoding.EncodeToString(root5[:]) + "\n", "leading zeros"},
		{"o\n5\nAAAA\n", "32 bytes"},
	} {
		body, _ := json.Marshal(remote.SignRequest{PayloadType: remote.PayloadCheckpointNote, Payload: []byte(tc.text)})
		code, ans := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(string(body)))
		if code != http.StatusBadRequest || !strings.Contains(ans, tc.want) {
			t.Fatalf("%q: %d %s, want 400 naming %q", tc.text, code, ans, tc.want)
		}
	}
}

// TestCheckpointChainCarriesOver: a tenant's default origin no longer names the key
// ("svc-log/<tenant>", receipt.DefaultLogID). The signer carries the tenant's
// checkpoint chain over from the origin its checkpoints had before,
// "svc-log/<16 hex of a keyid of this signer>/<tenant>", the current key's or a
// retired one's: after the upgrade and a key rotation, the first checkpoint under the
// stable origin must extend the last one signed under the old (a rollback and a fork
// are refused with 409), and the honest log goes on with a proof from it. Another
// tenant's old chain is not carried to this one.
func TestCheckpointChainCarriesOver(t *testing.T) {
	ctx := context.Background()
	old := seedKey(t, 1)
	heads := openHeads(t, t.TempDir())
	acme := growTree(t, nil, "acme", 20)
	fork := growTree(t, nil, "fork", 20)
	root10, _ := acme.RootAt(10)
	oldOrigin := "svc-log/" + old.KeyID()[:16] + "/acme"
	if err := heads.Record(remote.SignedHead{Log: "c2sp-checkpoint:" + oldOrigin, TreeSize: 10, RootHash: root10.String()}); err != nil {
		t.Fatal(err)
	}
	rotated := newSigner(t, 2, testToken, func(cfg *remote.ServerConfig) {
		cfg.Heads = heads
		cfg.Retired = []remote.RetiredKey{{Key: old.Public(), ValidFrom: validFrom.Add(-time.Hour), ValidTo: validFrom}}
	})
	c := newClient(t, rotated.http.URL, testToken)
	origin := receipt.DefaultLogID("acme")
	for _, tc := range []struct {
		what string
		tree *merkle.Tree
		size uint64
	}{{"a rollback", acme, 5}, {"a fork", fork, 10}, {"a fork that grew", fork, 12}} {
		ns, _ := c.NewNoteSigner(origin, "acme", tc.tree)
		root, _ := tc.tree.RootAt(tc.size)
		if _, err := ns.SignCheckpoint(ctx, tc.size, root); !errors.Is(err, remote.ErrConflict) {
			t.Fatalf("%s under the stable origin: %v, want ErrConflict", tc.what, err)
		}
	}
	ns, _ := c.NewNoteSigner(origin, "acme", acme)
	root20, _ := acme.RootAt(20)
	signed, err := ns.SignCheckpoint(ctx, 20, root20)
	if err != nil {
		t.Fatalf("the honest log under the stable origin: %v", err)
	}
	v, _ := note.NewVerifier(ns.VerifierKey())
	if n, err := note.Open(signed, note.VerifierList(v)); err != nil || !strings.HasPrefix(n.Text, origin+"\n20\n") {
		t.Fatalf("the checkpoint under the stable origin: %v\n%s", err, signed)
	}
	if h, ok := heads.Last("c2sp-checkpoint:" + origin); !ok || h.TreeSize != 20 {
		t.Fatalf("the chain under the stable origin: %+v %v", h, ok)
	}
	// globex never had a chain: its first checkpoint is trusted on first use, whatever
	// acme's old chain holds.
	nsG, _ := c.NewNoteSigner(receipt.DefaultLogID("globex"), "globex", fork)
	rootF, _ := fork.RootAt(3)
	if _, err := nsG.SignCheckpoint(ctx, 3, rootF); err != nil {
		t.Fatalf("another tenant's first checkpoint: %v", err)
	}
}
