package receipt_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	tdproof "github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

type issuerEnv struct {
	key  *signer.Key
	dir  string // receipts directory
	log  *receipt.FileLog
	is   *receipt.Issuer
	path string // log file
}

func newIssuerEnv(t *testing.T, kind string, cfg func(*receipt.IssuerConfig)) *issuerEnv {
	t.Helper()
	root := t.TempDir()
	e := &issuerEnv{key: testKey(t, 1), dir: filepath.Join(root, "receipts"), path: filepath.Join(root, "log.jsonl")}
	l, err := receipt.OpenFileLog(e.path, e.key, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e.log = l
	c := receipt.IssuerConfig{Key: e.key, Kind: kind, Log: l, ReceiptsDir: e.dir, Now: func() time.Time { return timeAt(42) }}
	if cfg != nil {
		cfg(&c)
	}
	is, err := receipt.NewIssuer(c)
	if err != nil {
		t.Fatal(err)
	}
	e.is = is
	return e
}

// issue issues one receipt of call c that ended as ex, failing the test on an error.
func (e *issuerEnv) issue(t *testing.T, c receipt.Call, ex receipt.Execution) *receipt.Bundle {
	t.Helper()
	p, err := e.is.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.is.Finish(context.Background(), p, ex)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sdkCall(args string) receipt.Call {
	return receipt.Call{
		Principal: receipt.Principal{Provenance: receipt.Claimed},
		Agent:     receipt.Agent{ID: "agent-1", Provenance: receipt.Claimed},
		Session:   receipt.Session{ID: strp("s1"), Provenance: receipt.Claimed},
		Model:     receipt.Model{ID: strp("m1"), Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: "search", Provenance: receipt.Claimed},
		Args:      json.RawMessage(args),
	}
}

// checkProof verifies a bundle's inclusion proof against its head with the
// project's merkle package and with transparency-dev/merkle, computing the leaf
// from an independently written canonical envelope.
func checkProof(t *testing.T, b *receipt.Bundle, trusted []signer.PublicKey) *receipt.TreeHead {
	t.Helper()
	if _, err := b.TreeHead.Verify(trusted); err != nil {
		t.Fatalf("tree head signature: %v", err)
	}
	th, err := receipt.DecodeTreeHead(b.TreeHead)
	if err != nil {
		t.Fatal(err)
	}
	if th.TreeSize != b.Inclusion.TreeSize {
		t.Fatalf("head size %d, proof size %d", th.TreeSize, b.Inclusion.TreeSize)
	}
	leaf := envelopeCanonicalByHand(b.Envelope)
	if !bytes.Equal(leaf, b.Envelope.Canonical()) {
		t.Fatalf("Envelope.Canonical differs from RFC 8785:\n%s\n%s", b.Envelope.Canonical(), leaf)
	}
	lh := rfc6962LeafHash(leaf)
	if merkle.LeafHash(leaf) != merkle.Hash(lh) {
		t.Fatal("merkle.LeafHash is not SHA-256(0x00 || leaf)")
	}
	hashes, err := receipt.ParseHashes(b.Inclusion.Hashes)
	if err != nil {
		t.Fatal(err)
	}
	root, err := merkle.ParseHash(th.RootHash)
	if err != nil {
		t.Fatal(err)
	}
	if err := merkle.VerifyInclusion(b.Inclusion.LeafIndex, b.Inclusion.TreeSize, merkle.Hash(lh), hashes, root); err != nil {
		t.Fatalf("merkle.VerifyInclusion: %v", err)
	}
	var proof [][]byte
	for _, h := range b.Inclusion.Hashes {
		raw, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		proof = append(proof, raw)
	}
	rootRaw, _ := hex.DecodeString(th.RootHash)
	if err := tdproof.VerifyInclusion(rfc6962.DefaultHasher, b.Inclusion.LeafIndex, b.Inclusion.TreeSize, lh[:], proof, rootRaw); err != nil {
		t.Fatalf("transparency-dev/merkle rejects the proof: %v", err)
	}
	return th
}

func readBundle(t *testing.T, path string) *receipt.Bundle {
	t.Helper()
	return testkit.ReadFileAs(t, path, receipt.ParseBundle)
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestNewIssuerRejectsBadConfig(t *testing.T) {
	k := testKey(t, 1)
	dir := t.TempDir()
	l := &failLog{err: errors.New("unused")}
	cases := map[string]receipt.IssuerConfig{
		"no key":        {Kind: receipt.KindSDK, Log: l, ReceiptsDir: dir},
		"no kind":       {Key: k, Log: l, ReceiptsDir: dir},
		"unknown kind":  {Key: k, Kind: "agent", Log: l, ReceiptsDir: dir},
		"kind in caps":  {Key: k, Kind: "Gateway", Log: l, ReceiptsDir: dir},
		"no log":        {Key: k, Kind: receipt.KindGateway, ReceiptsDir: dir},
		"no dir":        {Key: k, Kind: receipt.KindGateway, Log: l},
		"dir is a file": {Key: k, Kind: receipt.KindGateway, Log: l, ReceiptsDir: filepath.Join(writeFile(t, dir, "f", "x"), "sub")},
	}
	for name, cfg := range cases {
		if is, err := receipt.NewIssuer(cfg); err == nil || is != nil {
			t.Errorf("%s: NewIssuer = %v, %v", name, is, err)
		}
	}
	nested := filepath.Join(dir, "a", "b", "receipts")
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: k, Kind: receipt.KindSDK, Log: l, ReceiptsDir: nested})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(nested); err != nil || !st.IsDir() {
		t.Errorf("receipts directory not created: %v", err)
	}
	if is.KeyID() != k.KeyID() {
		t.Errorf("KeyID = %s", is.KeyID())
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIssuerWritesVerifiableReceipt(t *testing.T) {
	env := newIssuerEnv(t, receipt.KindSDK, func(c *receipt.IssuerConfig) { c.NewID = nil; c.Framework = "langchain" })
	ctx := context.Background()
	args := `{ "query" : "caf\u00e9 <b>", "limit": 10.0, "a": [1, 2] }`
	p, err := env.is.Begin(sdkCall(args))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(p.ReceiptID); err != nil {
		t.Errorf("receipt id %q is not a UUID: %v", p.ReceiptID, err)
	}
	if p.Timestamp != "2026-11-22T00:00:00.042Z" {
		t.Errorf("timestamp = %s", p.Timestamp)
	}
	result := json.RawMessage(`{"isError":false,"content":[{"type":"text","text":"ok"}]}`)
	b, err := env.is.Finish(ctx, p, receipt.Execution{Status: receipt.StatusExecuted, Result: result, Provenance: receipt.Claimed})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(env.dir, p.ReceiptID+".json")
	onDisk := readBundle(t, path)
	if !bytes.Equal(onDisk.Envelope.Canonical(), b.Envelope.Canonical()) || !bytes.Equal(onDisk.TreeHead.Canonical(), b.TreeHead.Canonical()) {
		t.Error("file differs from the returned bundle")
	}
	if names := listDir(t, env.dir); len(names) != 1 {
		t.Errorf("receipts dir holds %v, want just the receipt (no temp files)", names)
	}

	trusted := []signer.PublicKey{env.key.Public()}
	if k, err := onDisk.Envelope.Verify(trusted); err != nil || k.KeyID != env.key.KeyID() {
		t.Fatalf("envelope does not verify with the issuer key: %v", err)
	}
	if onDisk.Envelope.PayloadType != "application/vnd.in-toto+json" {
		t.Errorf("payloadType = %s", onDisk.Envelope.PayloadType)
	}
	st, err := receipt.DecodeStatement(onDisk.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" {
		t.Errorf("_type = %s", st.Type)
	}
	if st.PredicateType != "https://svc.dev/spec/receipt/v0.2" {
		t.Errorf("predicateType = %s", st.PredicateType)
	}
	canonArgs := `{"a":[1,2],"limit":10,"query":"caf` + "\u00e9" + ` <b>"}`
	argsDigest := sha256Hex([]byte(canonArgs))
	if d, err := receipt.DigestJSON([]byte(args)); err != nil || d != argsDigest {
		t.Errorf("DigestJSON(args) = %s, %v; want %s", d, err, argsDigest)
	}
	if len(st.Subject) != 1 || st.Subject[0].Name != "tool-call:search:"+p.ReceiptID || st.Subject[0].Digest["sha256"] != argsDigest || len(st.Subject[0].Digest) != 1 {
		t.Errorf("subject = %+v", st.Subject)
	}
	// The payload is canonical JSON.
	if c, err := receipt.CanonicalizeJSON(onDisk.Envelope.Payload); err != nil || !bytes.Equal(c, onDisk.Envelope.Payload) {
		t.Errorf("payload is not canonical: %v", err)
	}
	pred, err := st.DecodePredicate()
	if err != nil {
		t.Fatal(err)
	}
	if pred.ReceiptID != p.ReceiptID || pred.Timestamp != p.Timestamp {
		t.Errorf("receiptId/timestamp = %s %s", pred.ReceiptID, pred.Timestamp)
	}
	if pred.Issuer != (receipt.IssuerInfo{Kind: "sdk", KeyID: env.key.KeyID(), Version: receipt.Version, Framework: "langchain"}) {
		t.Errorf("issuer = %+v", pred.Issuer)
	}
	if pred.Request.ArgsDigest != argsDigest || string(pred.Request.Args) != canonArgs || pred.Request.Provenance != receipt.Claimed {
		t.Errorf("request = %s %s %s", pred.Request.Args, pred.Request.ArgsDigest, pred.Request.Provenance)
	}
	if want := sha256Hex([]byte(`{"content":[{"text":"ok","type":"text"}],"isError":false}`)); pred.Execution.ResultDigest != want {
		t.Errorf("resultDigest = %s, want %s", pred.Execution.ResultDigest, want)
	}
	if pred.Execution.Status != "executed" || pred.Policy != nil || pred.Delegation != nil || pred.Authorization != nil || len(pred.Facts) != 0 {
		t.Errorf("predicate = %+v", pred)
	}
	if *pred.Session.ID != "s1" || *pred.Model.ID != "m1" || pred.Tool.Name != "search" || pred.Agent.ID != "agent-1" {
		t.Errorf("call fields = %+v", pred)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(st.Predicate, &raw)
	if string(raw["policy"]) != "null" || string(raw["facts"]) != "{}" {
		t.Errorf("policy = %s, facts = %s", raw["policy"], raw["facts"])
	}
	if _, ok := raw["delegation"]; ok {
		t.Error("SDK receipt carries a delegation key")
	}

	th := checkProof(t, onDisk, trusted)
	if onDisk.Inclusion.LeafIndex != 0 || th.TreeSize != 1 {
		t.Errorf("first receipt at index %d of %d", onDisk.Inclusion.LeafIndex, th.TreeSize)
	}
	if env.log.File().Size() != 1 {
		t.Errorf("log holds %d leaves", env.log.File().Size())
	}

	// A second call lands at index 1 and its proof verifies against a new head.
	p2, _ := env.is.Begin(sdkCall(`{}`))
	b2, err := env.is.Finish(ctx, p2, receipt.Execution{Status: receipt.StatusDenied, Reason: "no", Provenance: receipt.Claimed})
	if err != nil {
		t.Fatal(err)
	}
	if p2.ReceiptID == p.ReceiptID {
		t.Error("two receipts share an id")
	}
	if th2 := checkProof(t, readBundle(t, filepath.Join(env.dir, p2.ReceiptID+".json")), trusted); th2.TreeSize != 2 || b2.Inclusion.LeafIndex != 1 {
		t.Errorf("second receipt: index %d size %d", b2.Inclusion.LeafIndex, th2.TreeSize)
	}
}

func TestIssuerArgsDefaultsAndErrors(t *testing.T) {
	env := newIssuerEnv(t, receipt.KindSDK, nil)
	c := sdkCall("")
	c.Args = nil
	b := env.issue(t, c, receipt.Execution{Status: receipt.StatusError, Error: "boom", Provenance: receipt.Claimed})
	st, _ := receipt.DecodeStatement(b.Envelope)
	pred, err := st.DecodePredicate()
	if err != nil {
		t.Fatal(err)
	}
	if string(pred.Request.Args) != "{}" || pred.Request.ArgsDigest != sha256Hex([]byte("{}")) {
		t.Errorf("nil args recorded as %s (%s)", pred.Request.Args, pred.Request.ArgsDigest)
	}
	if pred.Execution.Error != "boom" || pred.Execution.Result != nil || pred.Execution.ResultDigest != "" {
		t.Errorf("execution = %+v", pred.Execution)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{`, `[1e999]`, `{"a":NaN}`} {
		if _, err := env.is.Begin(sdkCall(bad)); err == nil {
			t.Errorf("Begin accepted args %s", bad)
		}
	}
}

// failLog is a Log that refuses every append (or only those after the first ok).
type failLog struct {
	err   error
	ok    int // appends to let through to next before failing
	next  receipt.Log
	calls atomic.Int32
}

func (l *failLog) Append(ctx context.Context, leaf []byte) (*receipt.Proof, error) {
	if n := int(l.calls.Add(1)); n <= l.ok {
		return l.next.Append(ctx, leaf)
	}
	return nil, l.err
}

func TestIssuerLogErrorWritesNothing(t *testing.T) {
	sentinel := errors.New("disk on fire")
	env := newIssuerEnv(t, receipt.KindSDK, nil)
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: env.key, Kind: receipt.KindSDK,
		Log: &failLog{err: errors.Join(receipt.ErrLogRefused, sentinel)}, ReceiptsDir: env.dir})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := is.Begin(sdkCall(`{"x":1}`))
	b, err := is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{}`), Provenance: receipt.Claimed})
	if err == nil || b != nil {
		t.Fatalf("Finish with a failing log = %v, %v", b, err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, receipt.ErrLogRefused) {
		t.Errorf("error does not wrap the log's: %v", err)
	}
	if names := listDir(t, env.dir); len(names) != 0 {
		t.Errorf("files written despite the log error: %v", names)
	}

	// Pre-commit: the authorization is refused, so nothing is written and the
	// pending call records no authorization.
	p, _ = is.Begin(sdkCall(`{"x":2}`))
	if err := is.Authorize(context.Background(), p); !errors.Is(err, sentinel) {
		t.Errorf("Authorize error = %v", err)
	}
	if p.Authorization() != nil {
		t.Error("Authorization set after a refused append")
	}
	if names := listDir(t, env.dir); len(names) != 0 {
		t.Errorf("files written despite the log error: %v", names)
	}

	// The authorization is logged but the receipt is refused: only the
	// authorization file exists.
	is2, _ := receipt.NewIssuer(receipt.IssuerConfig{Key: env.key, Kind: receipt.KindGateway,
		Log: &failLog{err: sentinel, ok: 1, next: env.log}, ReceiptsDir: env.dir})
	p, _ = is2.Begin(sdkCall(`{"x":3}`))
	if err := is2.Authorize(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if _, err := is2.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{}`), Provenance: receipt.Observed}); !errors.Is(err, sentinel) {
		t.Errorf("Finish error = %v", err)
	}
	if names := listDir(t, env.dir); len(names) != 1 || names[0] != p.ReceiptID+".authorization.json" {
		t.Errorf("receipts dir = %v, want only the authorization", names)
	}
}

func TestFileLogCancelledContext(t *testing.T) {
	env := newIssuerEnv(t, receipt.KindSDK, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, _ := env.is.Begin(sdkCall(`{}`))
	_, err := env.is.Finish(ctx, p, receipt.Execution{Status: receipt.StatusExecuted, Provenance: receipt.Claimed})
	if !errors.Is(err, receipt.ErrLogUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want ErrLogUnavailable and context.Canceled", err)
	}
	if names := listDir(t, env.dir); len(names) != 0 {
		t.Errorf("files written: %v", names)
	}
	if env.log.File().Size() != 0 {
		t.Error("leaf appended under a cancelled context")
	}
}

func TestIssuerAuthorizeThenFinish(t *testing.T) {
	env := newIssuerEnv(t, receipt.KindGateway, nil)
	ctx := context.Background()
	trusted := []signer.PublicKey{env.key.Public()}
	// Some earlier leaf so indices are not trivially 0 and 1.
	if _, err := env.log.Append(ctx, []byte(`"unrelated"`)); err != nil {
		t.Fatal(err)
	}
	principal := testKey(t, 10)
	grant := signGrant(t, receipt.NewGrant("alice", "agent-1", []string{"transfer"}, baseTime.Add(-time.Hour), 2*time.Hour, nil, nil), principal)
	call := receipt.Call{
		Principal:  receipt.Principal{ID: strp("alice"), KeyID: principal.KeyID(), Provenance: receipt.Attested},
		Agent:      receipt.Agent{ID: "agent-1", Provenance: receipt.Attested},
		Delegation: &receipt.Delegation{Envelope: grant, Provenance: receipt.Attested},
		Session:    receipt.Session{Provenance: receipt.Claimed},
		Model:      receipt.Model{Provenance: receipt.Claimed},
		Tool:       receipt.Tool{Name: "transfer", Provenance: receipt.Observed},
		Args:       json.RawMessage(`{"amount":5}`),
		Facts:      map[string]receipt.Fact{"balance": {Tool: "balance", Args: json.RawMessage(`{}`), Value: json.RawMessage(`100`), ResultDigest: "x", Provenance: receipt.Observed}},
		Policy:     &receipt.Policy{Decision: receipt.Allow, Reasons: []string{"p1"}, Errors: []string{}, PolicyDigest: "pd", Provenance: receipt.Observed},
	}
	p, err := env.is.Begin(call)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.is.Authorize(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Authorization() == nil {
		t.Fatal("no authorization after Authorize")
	}
	authPath := filepath.Join(env.dir, p.ReceiptID+".authorization.json")
	auth := readBundle(t, authPath)
	if _, err := auth.Envelope.Verify(trusted); err != nil {
		t.Fatalf("authorization signature: %v", err)
	}
	authHead := checkProof(t, auth, trusted)
	ast, err := receipt.DecodeStatement(auth.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if ast.PredicateType != "https://svc.dev/spec/authorization/v0.1" || ast.Type != receipt.StatementType {
		t.Errorf("authorization types: %s %s", ast.Type, ast.PredicateType)
	}
	apred, err := ast.DecodeAuthorization()
	if err != nil {
		t.Fatal(err)
	}
	if apred.ReceiptID != p.ReceiptID || apred.Tool.Name != "transfer" || apred.Policy == nil || apred.Policy.Decision != "allow" ||
		apred.Delegation == nil || *apred.Principal.ID != "alice" || apred.Request.ArgsDigest != sha256Hex([]byte(`{"amount":5}`)) {
		t.Errorf("authorization predicate = %+v", apred)
	}
	// Nothing about the outcome.
	var araw map[string]json.RawMessage
	_ = json.Unmarshal(ast.Predicate, &araw)
	for _, k := range []string{"execution", "authorization", "session", "model"} {
		if _, ok := araw[k]; ok {
			t.Errorf("authorization predicate carries %q", k)
		}
	}

	b, err := env.is.Finish(ctx, p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"ok":true}`), Provenance: receipt.Observed})
	if err != nil {
		t.Fatal(err)
	}
	rb := readBundle(t, filepath.Join(env.dir, p.ReceiptID+".json"))
	recHead := checkProof(t, rb, trusted)
	st, _ := receipt.DecodeStatement(rb.Envelope)
	if st.Subject[0].Name != ast.Subject[0].Name || st.Subject[0].Digest["sha256"] != ast.Subject[0].Digest["sha256"] {
		t.Errorf("subjects differ: %+v vs %+v", st.Subject, ast.Subject)
	}
	pred, err := st.DecodePredicate()
	if err != nil {
		t.Fatal(err)
	}
	if pred.Authorization == nil {
		t.Fatal("receipt does not embed the authorization")
	}
	if !bytes.Equal(pred.Authorization.Envelope.Canonical(), auth.Envelope.Canonical()) ||
		!bytes.Equal(pred.Authorization.TreeHead.Canonical(), auth.TreeHead.Canonical()) {
		t.Error("embedded authorization differs from the authorization file")
	}
	embedded := &receipt.Bundle{Envelope: pred.Authorization.Envelope, TreeHead: pred.Authorization.TreeHead, Inclusion: pred.Authorization.Inclusion}
	checkProof(t, embedded, trusted)
	if !(pred.Authorization.Inclusion.LeafIndex < rb.Inclusion.LeafIndex) || authHead.TreeSize > recHead.TreeSize {
		t.Errorf("authorization at %d/%d, receipt at %d/%d: not logged before", pred.Authorization.Inclusion.LeafIndex,
			authHead.TreeSize, rb.Inclusion.LeafIndex, recHead.TreeSize)
	}
	if pred.Authorization.Inclusion.LeafIndex != 1 || rb.Inclusion.LeafIndex != 2 || b.Inclusion.LeafIndex != 2 {
		t.Errorf("indices %d, %d", pred.Authorization.Inclusion.LeafIndex, rb.Inclusion.LeafIndex)
	}
	if pred.Delegation == nil || !bytes.Equal(pred.Delegation.Envelope.Canonical(), grant.Canonical()) || pred.Delegation.Provenance != receipt.Attested {
		t.Error("delegation not embedded as given")
	}
	if pred.Principal.KeyID != principal.KeyID() || pred.Facts["balance"].Provenance != receipt.Observed {
		t.Errorf("predicate = %+v", pred)
	}
	if _, _, err := receipt.VerifyGrant(pred.Delegation.Envelope, []signer.PublicKey{principal.Public()}, baseTime); err != nil {
		t.Errorf("embedded grant: %v", err)
	}
}

func TestIssuerConcurrentFinish(t *testing.T) {
	env := newIssuerEnv(t, receipt.KindSDK, nil)
	const n = 8
	var wg sync.WaitGroup
	bundles := make([]*receipt.Bundle, n)
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			p, err := env.is.Begin(sdkCall(`{"i":` + string(rune('0'+i)) + `}`))
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = p.ReceiptID
			bundles[i], errs[i] = env.is.Finish(context.Background(), p,
				receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{}`), Provenance: receipt.Claimed})
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	trusted := []signer.PublicKey{env.key.Public()}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		idx := bundles[i].Inclusion.LeafIndex
		if seen[idx] || idx >= n {
			t.Errorf("call %d: index %d repeated or out of range", i, idx)
		}
		seen[idx] = true
		checkProof(t, bundles[i], trusted)
		checkProof(t, readBundle(t, filepath.Join(env.dir, ids[i]+".json")), trusted)
	}
	if env.log.File().Size() != n {
		t.Errorf("log holds %d leaves, want %d", env.log.File().Size(), n)
	}
	if names := listDir(t, env.dir); len(names) != n {
		t.Errorf("receipts dir holds %d files: %v", len(names), names)
	}
}

func TestFileLogIdempotentAndPersistent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	k := testKey(t, 1)
	l, err := receipt.OpenFileLog(path, k, "my-log")
	if err != nil {
		t.Fatal(err)
	}
	l.SetClock(func() time.Time { return timeAt(999) })
	ctx := context.Background()
	leafA := receipt.Sign(receipt.PayloadInToto, []byte(`{"a":1}`), k).Canonical()
	leafB := receipt.Sign(receipt.PayloadInToto, []byte(`{"b":1}`), k).Canonical()
	pa, err := l.Append(ctx, leafA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := l.Append(ctx, leafB)
	if err != nil {
		t.Fatal(err)
	}
	pa2, err := l.Append(ctx, leafA)
	if err != nil {
		t.Fatal(err)
	}
	if pa.Inclusion.LeafIndex != 0 || pb.Inclusion.LeafIndex != 1 || pa2.Inclusion.LeafIndex != 0 {
		t.Errorf("indices %d %d %d, want 0 1 0", pa.Inclusion.LeafIndex, pb.Inclusion.LeafIndex, pa2.Inclusion.LeafIndex)
	}
	if pa2.Inclusion.TreeSize != 2 || l.File().Size() != 2 {
		t.Errorf("repeat append grew the log: size %d", l.File().Size())
	}
	th, err := receipt.DecodeTreeHead(pa2.TreeHead)
	if err != nil || th.Log != "my-log" || th.TreeSize != 2 || th.Timestamp != "2026-11-22T00:00:00.999Z" {
		t.Errorf("head = %+v, %v", th, err)
	}
	// The repeated leaf's fresh proof verifies at the new size.
	envA, _ := receipt.ParseEnvelope(leafA)
	checkProof(t, &receipt.Bundle{Envelope: envA, TreeHead: pa2.TreeHead, Inclusion: pa2.Inclusion}, []signer.PublicKey{k.Public()})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The file holds one line per distinct leaf, each the leaf as a JSON string.
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("log file has %d lines:\n%s", len(lines), data)
	}
	var first string
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first != string(leafA) {
		t.Errorf("line 1 = %s (%v)", lines[0], err)
	}
	// Reopened, the same leaf keeps its index and the root is unchanged.
	l2, err := receipt.OpenFileLog(path, k, "my-log")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	pb2, err := l2.Append(ctx, leafB)
	if err != nil {
		t.Fatal(err)
	}
	th2, _ := receipt.DecodeTreeHead(pb2.TreeHead)
	if pb2.Inclusion.LeafIndex != 1 || th2.TreeSize != 2 || th2.RootHash != th.RootHash {
		t.Errorf("after reopen: index %d size %d root %s (was %s)", pb2.Inclusion.LeafIndex, th2.TreeSize, th2.RootHash, th.RootHash)
	}
}

// The Log contract: a refusal wraps ErrLogRefused, an unreachable log
// ErrLogUnavailable. A leaf the log file can never hold (a line over
// merkle.MaxLineSize) is a refusal: retrying cannot help.
func TestFileLogOversizedLeafIsARefusal(t *testing.T) {
	l, err := receipt.OpenFileLog(filepath.Join(t.TempDir(), "log.jsonl"), testKey(t, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	leaf := receipt.Sign(receipt.PayloadInToto, bytes.Repeat([]byte("x"), merkle.MaxLineSize), testKey(t, 1)).Canonical()
	_, err = l.Append(context.Background(), leaf)
	if err == nil {
		t.Fatal("a leaf over MaxLineSize was accepted")
	}
	if !errors.Is(err, receipt.ErrLogRefused) || errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("err = %v; want ErrLogRefused (a permanent refusal), not ErrLogUnavailable", err)
	}
	// The refusal does not break the log for later leaves.
	if p, err := l.Append(context.Background(), []byte(`"small"`)); err != nil || p.Inclusion.LeafIndex != 0 {
		t.Errorf("append after the refusal: %v", err)
	}
}
