package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer/remote"
)

// growTree is a tree of n leaves whose leaf i is the hash of tag and i.
func growTree(t *testing.T, tree *merkle.Tree, tag string, n int) *merkle.Tree {
	t.Helper()
	if tree == nil {
		tree = newTree(t)
	}
	for tree.Size() < uint64(n) {
		if _, err := tree.Append(merkle.LeafHash(fmt.Appendf(nil, "%s-%d", tag, tree.Size()))); err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

func newTree(t *testing.T) *merkle.Tree {
	t.Helper()
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// headBody is a POST /sign body for the head of tree at size, for log logID, with a
// consistency proof from size from (none when from is 0).
func headBody(t *testing.T, tree *merkle.Tree, size, from uint64, logID string) string {
	t.Helper()
	root, err := tree.RootAt(size)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := receipt.TreeHeadPayload(receipt.TreeHead{TreeSize: size, RootHash: root.String(), Timestamp: "2026-04-01T00:00:00.000Z", Log: logID})
	if err != nil {
		t.Fatal(err)
	}
	req := remote.SignRequest{PayloadType: receipt.PayloadTreeHead, Payload: payload}
	if from > 0 {
		proof, err := tree.ConsistencyProof(from, size)
		if err != nil {
			t.Fatal(err)
		}
		req.Consistency = &remote.Consistency{FromSize: from, Proof: []string{}}
		for _, h := range proof {
			req.Consistency.Proof = append(req.Consistency.Proof, h.String())
		}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// conflict posts body and wants a 409 whose last head is (size, root of tree at size).
func wantConflict(t *testing.T, url, what, body string, last uint64, tree *merkle.Tree) {
	t.Helper()
	code, data := post(t, url, "Bearer "+testToken, "application/json", strings.NewReader(body))
	var c remote.Conflict
	if code != 409 || json.Unmarshal([]byte(data), &c) != nil || c.Error == "" {
		t.Fatalf("%s: %d %s, want 409 with a Conflict body", what, code, data)
	}
	root, _ := tree.RootAt(last)
	if c.Last.TreeSize != last || c.Last.RootHash != root.String() {
		t.Errorf("%s: the 409 names last head %+v, want size %d root %s", what, c.Last, last, root)
	}
}

// The signer is the last line of defence against a log server that holds the token:
// it signs a head only if it extends the last one it signed for that log. A smaller
// head (rollback), another root at the signed size (fork), a larger head without a
// proof or with a proof from another history are all refused with 409; an honest
// proof is accepted. Each log (the head's log id) is tracked on its own.
func TestSignerSignsOnlyHeadsThatExtend(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	honest := growTree(t, nil, "honest", 20)
	fork := growTree(t, nil, "fork", 20)
	ok := func(what, body string) {
		t.Helper()
		if code, data := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(body)); code != 200 {
			t.Fatalf("%s: %d %s, want 200", what, code, data)
		}
	}
	ok("first head (trusted on first use)", headBody(t, honest, 10, 0, "main"))
	ok("the same head again", headBody(t, honest, 10, 0, "main"))
	wantConflict(t, s.http.URL, "a smaller head", headBody(t, honest, 5, 0, "main"), 10, honest)
	wantConflict(t, s.http.URL, "another root at size 10", headBody(t, fork, 10, 0, "main"), 10, honest)
	wantConflict(t, s.http.URL, "a larger head without a proof", headBody(t, honest, 15, 0, "main"), 10, honest)
	wantConflict(t, s.http.URL, "a proof from the wrong size", headBody(t, honest, 15, 7, "main"), 10, honest)
	wantConflict(t, s.http.URL, "a larger head of another history", headBody(t, fork, 15, 10, "main"), 10, honest)
	ok("a larger head with its proof", headBody(t, honest, 15, 10, "main"))
	wantConflict(t, s.http.URL, "the old head after the larger one", headBody(t, honest, 10, 0, "main"), 15, honest)
	// Another log is another history: its first head is its own.
	ok("another log's first head", headBody(t, fork, 5, 0, "other"))
	wantConflict(t, s.http.URL, "the first log's rollback still refused", headBody(t, honest, 12, 0, "main"), 15, honest)
}

// The log server's side: SignHeadOf reads the tree, sends the proof from the last
// head it knows was signed, and corrects itself from the signer's 409 when another
// process (a second client) signed meanwhile. A tree behind the signed head (a
// replica) waits until it catches up.
func TestClientSignsHeadsWithProofs(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	ctx := context.Background()
	a, b := newClient(t, s.http.URL, testToken), newClient(t, s.http.URL, testToken)
	tree := growTree(t, nil, "log", 3)
	for _, n := range []int{3, 4, 9, 9, 30} {
		growTree(t, tree, "log", n)
		_, th, err := a.SignHeadOf(ctx, tree, "acme", "", time.Now())
		if err != nil || th.TreeSize != uint64(n) {
			t.Fatalf("size %d: %+v %v", n, th, err)
		}
	}
	growTree(t, tree, "log", 41)
	if _, th, err := b.SignHeadOf(ctx, tree, "acme", "", time.Now()); err != nil || th.TreeSize != 41 {
		t.Fatalf("second client: %+v %v", th, err)
	}
	growTree(t, tree, "log", 50)
	if _, th, err := a.SignHeadOf(ctx, tree, "acme", "", time.Now()); err != nil || th.TreeSize != 50 {
		t.Fatalf("first client after the second signed: %+v %v", th, err)
	}
	// A replica whose tree is behind catches up within the wait.
	replica := newTree(t)
	for i := range uint64(45) {
		h, _ := tree.LeafHash(i)
		replica.Append(h)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		for i := uint64(45); i < 50; i++ {
			h, _ := tree.LeafHash(i)
			replica.Append(h)
		}
	}()
	c := newClient(t, s.http.URL, testToken)
	if _, th, err := c.SignHeadOf(ctx, replica, "acme", "", time.Now()); err != nil || th.TreeSize != 50 {
		t.Fatalf("replica: %+v %v", th, err)
	}
	// Another history under the same tenant is refused, with ErrConflict.
	fork := growTree(t, nil, "fork", 60)
	if _, _, err := c.SignHeadOf(ctx, fork, "acme", "", time.Now()); !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("a fork: %v, want ErrConflict", err)
	}
	// Tenants are tracked apart, each under its default log id.
	if _, _, err := c.SignHeadOf(ctx, fork, "other", "", time.Now()); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// A restarted signer remembers: the state directory holds each log's last head.
// A state file that is corrupted (torn, altered, renamed) stops the store from
// opening, naming the file; it is never reset.
func TestHeadStateSurvivesAndCorruptionIsRefused(t *testing.T) {
	dir := t.TempDir()
	tree := growTree(t, nil, "log", 12)
	s := newSigner(t, 1, testToken, func(c *remote.ServerConfig) { c.Heads = openHeads(t, dir) })
	c := newClient(t, s.http.URL, testToken)
	if _, _, err := c.SignHeadOf(context.Background(), tree, "acme", "main", time.Now()); err != nil {
		t.Fatal(err)
	}
	s.http.Close()
	again := newSigner(t, 1, testToken, func(c *remote.ServerConfig) { c.Heads = openHeads(t, dir) })
	wantConflict(t, again.http.URL, "a rollback after a restart", headBody(t, tree, 4, 0, "main"), 12, tree)

	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("state files %v, want one", files)
	}
	good, _ := os.ReadFile(files[0])
	for name, bad := range map[string][]byte{
		"truncated":    good[:len(good)/2],
		"size altered": []byte(strings.Replace(string(good), `"treeSize":12`, `"treeSize":2`, 1)),
		"empty":        {},
	} {
		if err := os.WriteFile(files[0], bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := remote.OpenHeadStore(dir)
		if err == nil || !strings.Contains(err.Error(), filepath.Base(files[0])) || !strings.Contains(err.Error(), "corrupted") {
			t.Errorf("%s: OpenHeadStore = %v, want an error naming the corrupted file", name, err)
		}
	}
	os.WriteFile(files[0], good, 0o600)
	os.Rename(files[0], filepath.Join(dir, strings.Repeat("0", 64)+".json"))
	if _, err := remote.OpenHeadStore(dir); err == nil {
		t.Error("a state file under another log's name was accepted")
	}
}

// asTenant is body with the request's "tenant" set: what a log server says beside the
// head, which the signature does not cover.
func asTenant(t *testing.T, body, tenant string) string {
	t.Helper()
	var req remote.SignRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	req.Tenant = tenant
	b, _ := json.Marshal(req)
	return string(b)
}

// A compromised log server holding the token, over real HTTP to a real signer: every
// head the log server asks for names its log (the tenant's default log id when the
// operator set none), and the signer keeps its state under that signed name. Naming
// another tenant beside the head (or a tenant never seen) gets no rollback or fork of
// acme signed; a head naming no log is refused outright (it could pass for any log's);
// a head naming another log is signed only as that log's, which a verifier expecting
// acme's log refuses. State kept before heads named their log (under the tenant)
// carries over: the first named head must extend it; and a key rotation changes no
// log's name or state.
func TestCompromisedLogServerCannotMoveAHead(t *testing.T) {
	ctx := context.Background()
	s := newSigner(t, 1, testToken, nil)
	c := newClient(t, s.http.URL, testToken)
	acme := growTree(t, nil, "acme", 20)
	fork := growTree(t, nil, "fork", 20)
	logAcme := receipt.DefaultLogID("acme")
	if _, th, err := c.SignHeadOf(ctx, growTree(t, newTree(t), "acme", 10), "acme", "", time.Now()); err != nil || th.Log != logAcme || th.TreeSize != 10 {
		t.Fatalf("the honest log server's first head: %+v %v, want size 10 naming %q", th, err, logAcme)
	}
	wantConflict(t, s.http.URL, "acme's rollback said to be tenant globex's", asTenant(t, headBody(t, acme, 5, 0, logAcme), "globex"), 10, acme)
	wantConflict(t, s.http.URL, "acme's fork said to be a fresh tenant's", asTenant(t, headBody(t, fork, 10, 0, logAcme), "fresh-tenant"), 10, acme)
	wantConflict(t, s.http.URL, "acme's fork said to be acme's", asTenant(t, headBody(t, fork, 12, 0, logAcme), "acme"), 10, acme)
	for _, tenant := range []string{"acme", "globex", "fresh-tenant", ""} {
		code, data := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(asTenant(t, headBody(t, fork, 5, 0, ""), tenant)))
		if code != 400 || !strings.Contains(data, `without a \"log\"`) {
			t.Fatalf("a head naming no log, tenant %q beside it: %d %s, want 400", tenant, code, data)
		}
	}
	// Signed only as another log's: the signature says so.
	logOther := receipt.DefaultLogID("fresh-tenant")
	code, data := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(asTenant(t, headBody(t, fork, 5, 0, logOther), "acme")))
	if code != 200 {
		t.Fatalf("a fresh log's first head: %d %s", code, data)
	}
	env, err := receipt.ParseEnvelope([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if th, err := receipt.DecodeTreeHead(env); err != nil || th.Log != logOther {
		t.Fatalf("the fresh log's head names %+v (%v), want %q: never acme's", th, err, logOther)
	}
	// The honest log server goes on, through the client.
	if _, th, err := c.SignHeadOf(ctx, acme, "acme", "", time.Now()); err != nil || th.TreeSize != 20 {
		t.Fatalf("acme grows: %+v %v", th, err)
	}

	// Carried over: a signer whose state knows acme's last head under "tenant:acme"
	// (signed before heads named their log), and globex's under its name, after a key
	// rotation (the state is per log, not per key): the first head under each name
	// must extend it.
	old := seedKey(t, 1)
	heads := openHeads(t, t.TempDir())
	root10, _ := acme.RootAt(10)
	for _, name := range []string{"tenant:acme", receipt.DefaultLogID("globex")} {
		if err := heads.Record(remote.SignedHead{Log: name, TreeSize: 10, RootHash: root10.String()}); err != nil {
			t.Fatal(err)
		}
	}
	rotated := newSigner(t, 2, testToken, func(cfg *remote.ServerConfig) {
		cfg.Heads = heads
		cfg.Retired = []remote.RetiredKey{{Key: old.Public(), ValidFrom: validFrom.Add(-time.Hour), ValidTo: validFrom}}
	})
	for _, tenant := range []string{"acme", "globex"} {
		name := receipt.DefaultLogID(tenant)
		wantConflict(t, rotated.http.URL, tenant+": a rollback", headBody(t, acme, 5, 0, name), 10, acme)
		wantConflict(t, rotated.http.URL, tenant+": a fork", headBody(t, fork, 10, 0, name), 10, acme)
		code, data := post(t, rotated.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(headBody(t, fork, 10, 0, name)))
		var conflict remote.Conflict
		if code != 409 || json.Unmarshal([]byte(data), &conflict) != nil || conflict.Last.Log != name {
			t.Fatalf("%s: the 409 names %+v, want the log %q (the client retries only for its own log)", tenant, conflict.Last, name)
		}
		if _, th, err := newClient(t, rotated.http.URL, testToken).SignHeadOf(ctx, acme, tenant, "", time.Now()); err != nil || th.TreeSize != 20 || th.Log != name {
			t.Fatalf("%s: the honest log server goes on: %+v %v", tenant, th, err)
		}
	}
	if h, ok := heads.Last(receipt.DefaultLogID("acme")); !ok || h.TreeSize != 20 {
		t.Fatalf("acme's state under its name: %+v %v", h, ok)
	}
}
