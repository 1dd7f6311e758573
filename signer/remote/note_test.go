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

	"golang.org/x/mod/sumdb/note"

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
