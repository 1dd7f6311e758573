package logoflogs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

type tenant struct {
	tree *merkle.Tree
	ns   *projections.NoteSigner
}

func (tn *tenant) grow(t *testing.T, name string, n int) []byte {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := tn.tree.Append(merkle.LeafHash(fmt.Appendf(nil, "receipt %d of %s", tn.tree.Size(), name))); err != nil {
			t.Fatal(err)
		}
	}
	size := tn.tree.Size()
	root, _ := tn.tree.RootAt(size)
	cp, err := tn.ns.SignCheckpoint(context.Background(), size, root)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestThousandTenantsOneWitnessRequest: 1,000 tenants' checkpoints go into one log of
// logs whose checkpoint svc's C2SP witness cosigns with one add-checkpoint request an
// interval (10 tenants grow: one more; none: none); a tenant's receipt (a leaf of its
// log) is verified end to end: included under the tenant's checkpoint, which is
// included in the log of logs' checkpoint, cosigned under a C2SP tlog-policy. A
// checkpoint that is not the leaf, and a policy the witness does not meet, fail.
func TestThousandTenantsOneWitnessRequest(t *testing.T) {
	logKey, _ := signer.GenerateKey()
	wKey, _ := signer.GenerateKey()
	lolSigner, err := projections.NewNoteSigner("example.com/log-of-logs", logKey)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wKey, Name: "w.example.com/1", Logs: []string{lolSigner.VerifierKey()}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1); tw.ServeHTTP(w, r) }))
	defer ws.Close()
	lol, err := logoflogs.New(lolSigner, []string{ws.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tenants := map[string]*tenant{}
	cps := map[string][]byte{}
	for i := range 1000 {
		name := fmt.Sprintf("t%04d", i)
		tree, _ := merkle.NewTree(merkle.NewMemoryStore())
		ns, err := projections.NewNoteSigner(projections.DefaultOrigin("", name), logKey)
		if err != nil {
			t.Fatal(err)
		}
		tenants[name] = &tenant{tree: tree, ns: ns}
		cps[name] = tenants[name].grow(t, name, 1+i%7)
	}
	interval := func(want int64) {
		t.Helper()
		before := requests.Load()
		_, failed, err := lol.Interval(context.Background(), cps)
		if err != nil || len(failed) > 0 {
			t.Fatalf("interval: %v %v", err, failed)
		}
		if got := requests.Load() - before; got != want {
			t.Fatalf("%d add-checkpoint requests this interval, want %d", got, want)
		}
	}
	interval(1)
	for i := range 10 {
		name := fmt.Sprintf("t%04d", i*97)
		cps[name] = tenants[name].grow(t, name, 3)
	}
	interval(1)
	interval(0)

	policy, err := witness.ParsePolicy([]byte(fmt.Sprintf("log %s\nwitness W %s\nquorum W\n", lolSigner.VerifierKey(), tw.VerifierKey())))
	if err != nil {
		t.Fatal(err)
	}
	name := "t0097" // grew in the second interval
	p, err := lol.Proof(name)
	if err != nil {
		t.Fatal(err)
	}
	tv, _ := note.NewVerifier(tenants[name].ns.VerifierKey())
	size, root, err := logoflogs.Verify(p, policy, tv)
	if err != nil {
		t.Fatal(err)
	}
	tree := tenants[name].tree
	const leaf = 2
	inc, err := tree.InclusionProof(leaf, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := merkle.VerifyInclusion(leaf, size, merkle.LeafHash(fmt.Appendf(nil, "receipt %d of %s", leaf, name)), inc, root); err != nil {
		t.Fatalf("the receipt is not under the witnessed tenant checkpoint: %v", err)
	}
	bad := *p
	bad.Checkpoint = cps["t0001"]
	if _, _, err := logoflogs.Verify(&bad, policy, tv); err == nil || !strings.Contains(err.Error(), "not in the log of logs") {
		t.Fatalf("another tenant's checkpoint as the leaf: %v", err)
	}
	other, _ := signer.GenerateKey()
	oc, _ := witness.NewCosigner("w.example.com/2", other, nil)
	strict, _ := witness.ParsePolicy([]byte(fmt.Sprintf("log %s\nwitness W %s\nwitness X %s\ngroup g all W X\nquorum g\n", lolSigner.VerifierKey(), tw.VerifierKey(), oc.VerifierKey())))
	if _, _, err := logoflogs.Verify(p, strict, tv); err == nil || !strings.Contains(err.Error(), "not met") {
		t.Fatalf("a policy the witness alone does not meet: %v", err)
	}
}

// TestRestoredLogKeepsItsWitness: a runner that persisted each interval's leaves
// (Pending, before any witness saw them) dies; the next one restores them, replays
// overlapping records harmlessly, refuses a missing one, and its next checkpoint is
// cosigned by the same witness, which accepts only a log consistent with what it
// cosigned before. A tenant's proof from the new runner verifies under the policy.
func TestRestoredLogKeepsItsWitness(t *testing.T) {
	logKey, _ := signer.GenerateKey()
	wKey, _ := signer.GenerateKey()
	lolSigner, err := projections.NewNoteSigner("example.com/log-of-logs", logKey)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wKey, Name: "w.example.com/1", Logs: []string{lolSigner.VerifierKey()}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ws := httptest.NewServer(tw)
	defer ws.Close()
	type record struct {
		first   uint64
		entries []logoflogs.Entry
	}
	var persisted []record
	tenants := map[string]*tenant{}
	cps := map[string][]byte{}
	grow := func(names ...string) {
		for _, name := range names {
			if tenants[name] == nil {
				tree, _ := merkle.NewTree(merkle.NewMemoryStore())
				ns, _ := projections.NewNoteSigner(projections.DefaultOrigin("", name), logKey)
				tenants[name] = &tenant{tree: tree, ns: ns}
			}
			cps[name] = tenants[name].grow(t, name, 2)
		}
	}
	interval := func(lol *logoflogs.Log) {
		t.Helper()
		pending := lol.Pending(cps)
		persisted = append(persisted, record{lol.Size(), pending}) // durable first
		if err := lol.Restore(lol.Size(), pending); err != nil {
			t.Fatal(err)
		}
		if _, failed, err := lol.Checkpoint(context.Background()); err != nil || len(failed) > 0 {
			t.Fatalf("checkpoint: %v %v", err, failed)
		}
	}
	first, err := logoflogs.New(lolSigner, []string{ws.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	grow("a", "b", "c")
	interval(first)
	grow("b")
	interval(first)

	next, err := logoflogs.New(lolSigner, []string{ws.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Restore(persisted[1].first, persisted[1].entries); err == nil || !strings.Contains(err.Error(), "a record is missing") {
		t.Fatalf("a restore that skips a record: %v", err)
	}
	for _, r := range append(persisted, persisted[0]) { // the last: a replayed overlap
		if err := next.Restore(r.first, r.entries); err != nil {
			t.Fatal(err)
		}
	}
	if next.Size() != 4 {
		t.Fatalf("restored %d leaves, want 4", next.Size())
	}
	grow("a", "d")
	interval(next) // the witness holds size 4 from the first runner: it needs consistency
	policy, err := witness.ParsePolicy([]byte(fmt.Sprintf("log %s\nwitness W %s\nquorum W\n", lolSigner.VerifierKey(), tw.VerifierKey())))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		p, err := next.Proof(name)
		if err != nil {
			t.Fatal(err)
		}
		tv, _ := note.NewVerifier(tenants[name].ns.VerifierKey())
		if size, _, err := logoflogs.Verify(p, policy, tv); err != nil || size != tenants[name].tree.Size() {
			t.Fatalf("tenant %s: size %d, %v", name, size, err)
		}
	}
}
