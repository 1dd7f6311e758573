package logoflogs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// proofOf is the proof of tenant's latest leaf, whose bytes are cp, carried through
// its C2SP tlog-proof text (Marshal, then ParseProof gives it back whole).
func proofOf(t *testing.T, lol *logoflogs.Log, tenant string, cp []byte) *logoflogs.Proof {
	t.Helper()
	i, ok := lol.Latest(tenant)
	if !ok {
		t.Fatalf("tenant %s has no leaf", tenant)
	}
	p, err := lol.ProofAt(i, cp)
	if err != nil {
		t.Fatal(err)
	}
	text := p.Marshal()
	if !bytes.HasPrefix(text, []byte("c2sp.org/tlog-proof@v1\nextra ")) || !bytes.HasSuffix(text, p.Witnessed) {
		t.Fatalf("not a tlog-proof:\n%s", text)
	}
	back, err := logoflogs.ParseProof(text)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, p) {
		t.Fatalf("the tlog-proof read back differs:\n%+v\n%+v", back, p)
	}
	if _, err := lol.ProofAt(i, append(cp, 'x')); err == nil || !strings.Contains(err.Error(), "does not hash") {
		t.Fatalf("a proof of bytes that are not the leaf: %v", err)
	}
	return back
}

// newLogOfLogsWitness makes the log of logs' key and note signer and a C2SP witness
// (with its own key and directory) that knows that log.
func newLogOfLogsWitness(t *testing.T) (*signer.Key, *projections.NoteSigner, *witness.TlogWitness) {
	t.Helper()
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
	return logKey, lolSigner, tw
}

// TestThousandTenantsOneWitnessRequest: 1,000 tenants' checkpoints go into one log of
// logs whose checkpoint svc's C2SP witness cosigns with one add-checkpoint request an
// interval (10 tenants grow: one more; none: none); a tenant's receipt (a leaf of its
// log) is verified end to end: included under the tenant's checkpoint, which is
// included in the log of logs' checkpoint, cosigned under a C2SP tlog-policy. A
// checkpoint that is not the leaf, and a policy the witness does not meet, fail.
func TestThousandTenantsOneWitnessRequest(t *testing.T) {
	logKey, lolSigner, tw := newLogOfLogsWitness(t)
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
	p := proofOf(t, lol, name, cps[name])
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
	logKey, lolSigner, tw := newLogOfLogsWitness(t)
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
		p := proofOf(t, next, name, cps[name])
		tv, _ := note.NewVerifier(tenants[name].ns.VerifierKey())
		if size, _, err := logoflogs.Verify(p, policy, tv); err != nil || size != tenants[name].tree.Size() {
			t.Fatalf("tenant %s: size %d, %v", name, size, err)
		}
	}
}

// TestParseProofRefuses: a tlog-proof that is not one of the log of logs' (no extra
// line, a non-canonical index, a short hash, no checkpoint, too large) is refused
// with what is wrong.
func TestParseProofRefuses(t *testing.T) {
	good := "c2sp.org/tlog-proof@v1\nextra Y3A=\nindex 3\n" + strings.Repeat("A", 43) + "=\n\norigin\n4\nroot\n\n— sig\n"
	if p, err := logoflogs.ParseProof([]byte(good)); err != nil || p.Index != 3 || string(p.Checkpoint) != "cp" || len(p.Inclusion) != 1 {
		t.Fatalf("a well-formed proof: %+v %v", p, err)
	}
	for _, c := range []struct{ in, want string }{
		{strings.Replace(good, "extra Y3A=\n", "", 1), "no extra line"},
		{strings.Replace(good, "extra Y3A=", "extra Y3A", 1), "extra is not base64"},
		{strings.Replace(good, "extra Y3A=", "other Y3A=", 1), "no extra line"},
		{strings.Replace(good, "index 3", "index 03", 1), "not index <decimal>"},
		{strings.Replace(good, strings.Repeat("A", 43)+"=", "AAAA", 1), "inclusion line 1"},
		{strings.Replace(good, "tlog-proof@v1", "tlog-proof@v2", 1), "first line"},
		{strings.SplitAfter(good, "\n\n")[0], "no empty line"},
		{good + strings.Repeat("x", logoflogs.MaxProofBytes), "at most"},
	} {
		if _, err := logoflogs.ParseProof([]byte(c.in)); err == nil || !errors.Is(err, logoflogs.ErrProof) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.in[:min(len(c.in), 60)], err, c.want)
		}
	}
}

// FuzzParseProof: any input is refused or read back to what Marshal writes again.
func FuzzParseProof(f *testing.F) {
	f.Add([]byte("c2sp.org/tlog-proof@v1\nextra Y3A=\nindex 3\n" + strings.Repeat("A", 43) + "=\n\norigin\n4\nroot\n\n— sig\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := logoflogs.ParseProof(data)
		if err != nil {
			return
		}
		again, err := logoflogs.ParseProof(p.Marshal())
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("read back %+v %v, want %+v", again, err, p)
		}
	})
}
