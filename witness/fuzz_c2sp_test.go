package witness_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// Fuzz targets for the C2SP inputs: a tlog-witness add-checkpoint request (from anyone
// on the network) and a tlog-policy file. Run one with e.g.
// go test ./witness -run '^$' -fuzz '^FuzzAddCheckpoint$' -fuzztime 10s.

// FuzzAddCheckpoint posts arbitrary bodies to POST /add-checkpoint of one witness,
// whose state carries from one input to the next. It never panics, answers only what
// C2SP tlog-witness allows (200, 400, 403, 404, 409, 413, 422), and a 200 is a
// cosignature that verifies, over a checkpoint signed by the log's key, never smaller
// than the last one it cosigned.
func FuzzAddCheckpoint(f *testing.F) {
	lk, _ := signer.KeyFromSeed(bytes.Repeat([]byte{7}, 32))
	ls, err := signer.NewNoteSigner("example.com/log", lk)
	if err != nil {
		f.Fatal(err)
	}
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	sign := func(n uint64) []byte {
		for tree.Size() < n {
			_, _ = tree.Append(merkle.LeafHash(fmt.Appendf(nil, "leaf %d", tree.Size())))
		}
		root, _ := tree.RootAt(n)
		s, _ := note.Sign(&note.Note{Text: projections.CheckpointBody("example.com/log", n, root)}, ls)
		return s
	}
	cp3, cp5 := sign(3), sign(5)
	proof, _ := tree.ConsistencyProof(3, 5)
	f.Add(projections.AddCheckpointBody(0, nil, cp3))
	f.Add(projections.AddCheckpointBody(3, proof, cp5))
	f.Add(projections.AddCheckpointBody(5, nil, cp5))
	f.Add(projections.AddCheckpointBody(3, nil, cp5))
	f.Add([]byte("old 0\n\nexample.com/log\n1\nAAAA\n\n— example.com/log AAAA\n"))
	f.Add([]byte("old 18446744073709551615\n\n"))
	f.Add([]byte("old 1\n" + string(bytes.Repeat([]byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 64)) + "\n"))
	f.Add([]byte(""))
	wk, _ := signer.KeyFromSeed(bytes.Repeat([]byte{8}, 32))
	w, err := witness.NewTlogWitness(witness.TlogConfig{Key: wk, Name: "w.example.com/fuzz", Logs: []string{ls.VerifierKey()}, Dir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	logV, _ := note.NewVerifier(ls.VerifierKey())
	cosV, _ := witness.NewCosignatureVerifier(w.VerifierKey())
	var cosigned uint64
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/add-checkpoint", bytes.NewReader(body)))
		switch rec.Code {
		case 400, 403, 404, 409, 413, 422:
			return
		case 200:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		_, signed, ok := bytes.Cut(body, []byte("\n\n"))
		if !ok {
			t.Fatalf("cosigned a body without a blank line: %q", body)
		}
		n, err := note.Open(append(bytes.Clone(signed), rec.Body.Bytes()...), note.VerifierList(logV, cosV))
		if err != nil || len(n.Sigs) < 2 {
			t.Fatalf("the answer is not a cosignature of a checkpoint the log signed: %v\n%q\n%q", err, signed, rec.Body.String())
		}
		size, _, err := witness.ParseCheckpointBody(n.Text)
		if err != nil || size < cosigned {
			t.Fatalf("cosigned size %d after %d (%v)", size, cosigned, err)
		}
		cosigned = size
	})
}

// FuzzParsePolicy parses arbitrary tlog-policy files. It never panics, and a policy it
// accepts can be checked against a cosigned checkpoint (every quorum name resolves).
func FuzzParsePolicy(f *testing.F) {
	lk, _ := signer.KeyFromSeed(bytes.Repeat([]byte{7}, 32))
	ls, _ := signer.NewNoteSigner("example.com/log", lk)
	wk, _ := signer.KeyFromSeed(bytes.Repeat([]byte{8}, 32))
	cos, _ := witness.NewCosigner("w.example.com/1", wk, nil)
	signed, err := note.Sign(&note.Note{Text: projections.CheckpointBody("example.com/log", 1, merkle.LeafHash([]byte("x")))}, ls, cos)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("log " + ls.VerifierKey() + "\nwitness A " + cos.VerifierKey() + "\nquorum A\n"))
	f.Add([]byte("witness A " + cos.VerifierKey() + " https://w.example.com\ngroup g any A\ngroup h 1 g\nquorum h\n"))
	f.Add([]byte("# comment\nquorum none\n"))
	f.Add([]byte("group g all\nquorum g\n"))
	f.Add([]byte("quorum A\nquorum A\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := witness.ParsePolicy(data)
		if err != nil {
			if p != nil {
				t.Fatal("a policy with an error")
			}
			return
		}
		_, _, _ = p.Verify(signed)
	})
}
