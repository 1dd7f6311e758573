package witness_test

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// TestPolicyQuorum: a C2SP tlog-policy decides whether a cosigned checkpoint is
// accepted: signed by a listed log, cosigned by its quorum (here 2 of 3 witnesses and
// the fourth); fewer cosignatures, an unlisted log, or a malformed policy are refused
// with what was wrong.
func TestPolicyQuorum(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "log.example.com/acme")
	ls, _ := note.NewSigner(skey)
	var cos []*witness.Cosigner
	var pol strings.Builder
	fmt.Fprintf(&pol, "# the log\nlog %s https://log.example.com/t/acme\n", vkey)
	for i := range 4 {
		k, _ := signer.GenerateKey()
		c, err := witness.NewCosigner(fmt.Sprintf("w%d.example.com", i), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		cos = append(cos, c)
		fmt.Fprintf(&pol, "witness W%d\t%s\n", i, c.VerifierKey())
	}
	pol.WriteString("group some 2 W0 W1 W2\ngroup both all some W3\n  quorum both  \n")
	p, err := witness.ParsePolicy([]byte(pol.String()))
	if err != nil {
		t.Fatal(err)
	}
	text := projections.CheckpointBody("log.example.com/acme", 7, merkle.LeafHash([]byte("x")))
	sign := func(signers ...note.Signer) []byte {
		signed, err := note.Sign(&note.Note{Text: text}, signers...)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	if _, names, err := p.Verify(sign(ls, cos[0], cos[2], cos[3])); err != nil || len(names) != 3 {
		t.Fatalf("2 of 3 and W3: %v %v", names, err)
	}
	for _, c := range []struct {
		signed []byte
		want   string
	}{
		{sign(ls, cos[0], cos[3]), `quorum "both" is not met`},
		{sign(ls, cos[0], cos[1], cos[2]), "not met"},
		{sign(cos[0], cos[1], cos[3]), "checkpoint"},
	} {
		if _, _, err := p.Verify(c.signed); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v, want %q", err, c.want)
		}
	}
	none, err := witness.ParsePolicy([]byte("quorum none\n"))
	if err != nil {
		t.Fatal(err)
	}
	lv, _ := note.NewVerifier(vkey)
	if _, _, err := none.Verify(sign(ls), lv); err != nil {
		t.Fatalf("quorum none with the log key given: %v", err)
	}
	w := cos[0].VerifierKey()
	for _, c := range []struct{ policy, want string }{
		{"log " + vkey + "\n", "no quorum line"},
		{"quorum W1\n", "not a witness or group defined above"},
		{"witness A " + w + "\nwitness B " + w + "\nquorum A\n", "duplicate key"},
		{"witness A " + w + "\ngroup g 2 A\nquorum g\n", "threshold"},
		{"witness A " + w + "\ngroup g any A A\nquorum g\n", "listed twice"},
		{"witness none " + w + "\nquorum none\n", "reserved"},
		{"witness A " + vkey + "\nquorum A\n", "cosignature/v1"},
		{"frobnicate\n", "line 1: not a log"},
	} {
		if _, err := witness.ParsePolicy([]byte(c.policy)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q: %v, want %q", c.policy, err, c.want)
		}
	}
}
