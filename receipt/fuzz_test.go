package receipt_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Fuzz targets for every parser of outside input in this package. Run one with
// e.g. go test ./receipt -run '^$' -fuzz '^FuzzParseEnvelope$' -fuzztime 10s.

func seedEnvelopes(f *testing.F) {
	k := testKey(f, 1)
	e := receipt.Sign(receipt.PayloadInToto, []byte(`{"_type":"https://in-toto.io/Statement/v1"}`), k)
	e.AddSignature(testKey(f, 2))
	data, _ := json.Marshal(e)
	f.Add(data)
	f.Add(e.Canonical())
	th, _ := receipt.SignTreeHead(k, 3, strings.Repeat("0a", 32), baseTime, "log")
	data, _ = json.MarshalIndent(th, "", "  ")
	f.Add(data)
	f.Add([]byte(`{"payloadType":"t","payload":"aGk=","signatures":[]}`))
	f.Add([]byte(`{"payloadType":"t","payload":"aGl=","signatures":[{"keyid":"x","sig":"aGk="}]}`))
	f.Add([]byte(`{"payloadType":"t","payload":"aGk=","signatures":[{"keyid":"x","sig":"aGk="}]}]`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
}

func FuzzParseEnvelope(f *testing.F) {
	seedEnvelopes(f)
	// One trusted key: signature checks dominate the cost of an exec, and the
	// fuzzer's minimizer runs thousands of them.
	trusted := []signer.PublicKey{testKey(f, 2).Public()}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := receipt.ParseEnvelope(data)
		if err != nil {
			return
		}
		if e.PayloadType == "" || e.Signatures == nil {
			t.Fatalf("accepted an envelope without type or signatures: %q", data)
		}
		if _, err := e.Verify(trusted); (err == nil) != (len(e.VerifiedBy(trusted)) == 1) {
			t.Fatalf("Verify and VerifiedBy disagree on %q", data)
		}
		// Its canonical form parses back to the same envelope.
		c := e.Canonical()
		e2, err := receipt.ParseEnvelope(c)
		if err != nil {
			t.Fatalf("canonical form %q of accepted %q does not parse: %v", c, data, err)
		}
		if !bytes.Equal(e2.Canonical(), c) {
			t.Fatalf("canonical form is not stable: %q vs %q", e2.Canonical(), c)
		}
		if plainASCII(e) && !bytes.Equal(envelopeCanonicalByHand(e), c) {
			t.Fatalf("Canonical %q differs from RFC 8785 %q", c, envelopeCanonicalByHand(e))
		}
	})
}

func FuzzParseBundle(f *testing.F) {
	k := testKey(f, 1)
	env := receipt.Sign(receipt.PayloadInToto, []byte(`{}`), k)
	th, _ := receipt.SignTreeHead(k, 1, strings.Repeat("00", 32), baseTime, "")
	data, _ := json.MarshalIndent(receipt.Bundle{Envelope: env, TreeHead: th,
		Inclusion: receipt.Inclusion{LeafIndex: 0, TreeSize: 1, Hashes: []string{}}}, "", "  ")
	f.Add(data)
	data, _ = json.Marshal(receipt.Bundle{Envelope: env, TreeHead: th,
		Inclusion: receipt.Inclusion{LeafIndex: 3, TreeSize: 9, Hashes: []string{strings.Repeat("ab", 32), "zz"}}})
	f.Add(data)
	f.Add([]byte(`{"envelope":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := receipt.ParseBundle(data)
		if err != nil {
			return
		}
		if b.Envelope == nil || b.TreeHead == nil {
			t.Fatalf("accepted a bundle without envelope or tree head: %q", data)
		}
		_, _ = b.Envelope.Verify([]signer.PublicKey{k.Public()})
		_, _ = receipt.DecodeTreeHead(b.TreeHead)
		if st, err := receipt.DecodeStatement(b.Envelope); err == nil {
			_, _ = st.SubjectDigest()
			_, _ = st.DecodePredicate()
			_, _ = st.DecodeAuthorization()
		}
		_, _ = receipt.ParseHashes(b.Inclusion.Hashes)
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receipt.ParseBundle(out); err != nil {
			t.Fatalf("re-marshalled bundle %q does not parse: %v", out, err)
		}
	})
}

func FuzzDecodeGrant(f *testing.F) {
	p, a1, a2 := testKey(f, 10), testKey(f, 11), testKey(f, 12)
	root := receipt.NewGrant("alice", "agent-1", []string{"read", "write"}, baseTime.Add(-time.Hour), 24*time.Hour, pub(a1), nil)
	rootEnv, _ := receipt.SignJSON(receipt.PayloadDelegation, root, p)
	child := receipt.NewGrant("alice", "agent-2", []string{"read"}, baseTime, time.Hour, pub(a2), rootEnv)
	childEnv, _ := receipt.SignJSON(receipt.PayloadDelegation, child, a1)
	for _, e := range []*receipt.Envelope{rootEnv, childEnv} {
		data, _ := json.Marshal(e)
		f.Add(data)
	}
	f.Add([]byte(`{"payloadType":"application/vnd.svc.delegation+json","payload":"e30=","signatures":[]}`))
	trusted := []signer.PublicKey{p.Public()}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := receipt.ParseEnvelope(data)
		if err != nil {
			return
		}
		c, err := receipt.UnwrapChain(e)
		if err != nil {
			return
		}
		if c.Depth() < 1 || len(c.Envelopes) != len(c.Grants) || c.Leaf() == nil || c.Root() == nil {
			t.Fatalf("inconsistent chain from %q", data)
		}
		_, _ = c.VerifyRoot(trusted)
		_ = c.VerifyLinks()
		for _, g := range c.Grants {
			_ = g.ValidAt(baseTime)
			_ = receipt.CheckDelegation(g, []string{"read"}, baseTime, baseTime.Add(time.Minute))
		}
		if ch, _, err := receipt.VerifyGrant(e, trusted, baseTime); err == nil && ch.Depth() > receipt.MaxChainDepth {
			t.Fatalf("VerifyGrant accepted a chain %d deep", ch.Depth())
		}
	})
}

func FuzzCanonicalizeJSON(f *testing.F) {
	for _, s := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`[-0, 1e21, 1e-7, 5e-324, 1.7976931348623157e308]`,
		`"<>&\u2028"`, `{"a":{"b":[{}]}}`, `{"a":1,"a":2}`, ` 7 `, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := receipt.CanonicalizeJSON(data)
		if err != nil {
			return
		}
		c2, err := receipt.CanonicalizeJSON(c)
		if err != nil {
			t.Fatalf("canonical output %q does not canonicalize: %v", c, err)
		}
		if !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q -> %q", data, c, c2)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical output %q of %q is not valid JSON", c, data)
		}
		var in, out any
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("CanonicalizeJSON accepted %q, which encoding/json rejects: %v", data, err)
		}
		if err := json.Unmarshal(c, &out); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("canonical form changes the value: %q (%#v) -> %q (%#v)", data, in, c, out)
		}
	})
}

// plainASCII reports whether every string of e is printable ASCII needing no
// JSON escape, the case envelopeCanonicalByHand handles.
func plainASCII(e *receipt.Envelope) bool {
	ok := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	if !ok(e.PayloadType) {
		return false
	}
	for _, s := range e.Signatures {
		if !ok(s.KeyID) {
			return false
		}
	}
	return true
}

// FuzzEnvelopeCanonical checks the direct encoding of an envelope's canonical form
// against the general one (encoding/json, then the JCS canonicalizer).
func FuzzEnvelopeCanonical(f *testing.F) {
	f.Add("application/vnd.in-toto+json", []byte(`{"a":1}`), "0123abcd", []byte{1, 2, 3}, 1)
	f.Add("t\"\\\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f<>&\u2028é", []byte{}, "k\ne\"y\u00e9", []byte{}, 2)
	f.Add("\xff", []byte(nil), "\xfe", []byte(nil), 0)
	f.Fuzz(func(t *testing.T, payloadType string, payload []byte, keyID string, sig []byte, nsig int) {
		e := &receipt.Envelope{PayloadType: payloadType, Payload: payload}
		for i := range nsig % 4 {
			e.Signatures = append(e.Signatures, receipt.Signature{KeyID: keyID + strings.Repeat("x", i), Sig: sig})
		}
		want, err := receipt.Canonical(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Canonical(); !bytes.Equal(got, want) {
			t.Fatalf("Canonical() = %s\nwant          %s", got, want)
		}
		// twice: the second takes the buffer the first gave back
		for range 2 {
			if got := e.LeafHash(); got != merkle.LeafHash(want) {
				t.Fatalf("LeafHash() = %s, want %s", got, merkle.LeafHash(want))
			}
		}
	})
}

// FuzzCanonicalizeMatchesReference checks CanonicalizeJSON against the reference
// implementation, github.com/gowebpki/jcs: the same inputs accepted, the same bytes
// out.
func FuzzCanonicalizeMatchesReference(f *testing.F) {
	for _, s := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7,"\uffff":8,"𝄞":9}`,
		`[-0, 1e21, 1e-7, 5e-324, 1.7976931348623157e308, 1e309, 123456789012345, 1234567890123456, 9007199254740993, -0.0, 01, 1., .5, +1, 0x10]`,
		`"<>&\u2028"`, `{"a":{"b":[{}]}}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, ` 7 `, `[`, `[1,]`, `[,1]`, `{"a":1,}`, `{,}`,
		`[1 2]`, `tr ue`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, `"\uD83D\uDE00"`, "\"\xff\"", "\"\xed\xa0\x80\"", "[1é]",
		"\"a\x01\"", `"\x"`, `"\u00zz"`, `{"a" 1}`, `{"a":}`, `[]  x`, `null`, ``, "\t[\n]\r", `{"b":1,"a":[true,false,null,"x\\y"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := jcs.Transform(data)
		got, gerr := receipt.CanonicalizeJSON(data)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: reference error %v, ours %v", data, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: reference %q, ours %q", data, want, got)
		}
	})
}

// FuzzStatementCanonical checks the statement's direct canonical form against the
// general one (encoding/json, then the canonicalizer).
func FuzzStatementCanonical(f *testing.F) {
	f.Add("https://in-toto.io/Statement/v1", "tool-call:t:1", "sha256", "ab12", "https://svc.dev/receipt/v0.2", []byte(`{"b":1,"a":[1.50,"x"]}`), 1)
	f.Add("t\"\\\x01é", "n\u2028\x7f", "\ud7ff", "", "", []byte(`{}`), 2)
	f.Add("\xff", "", "a", "b", "p", []byte(`null`), 0)
	f.Add("", "", "", "", "", []byte(`{"a":1,"a":2}`), 3)
	f.Fuzz(func(t *testing.T, typ, name, dk, dv, predType string, pred []byte, shape int) {
		st := &receipt.Statement{Type: typ, PredicateType: predType, Predicate: pred}
		if shape&4 != 0 {
			st.Predicate = nil
		}
		switch shape & 3 {
		case 1:
			st.Subject = []receipt.Subject{{Name: name, Digest: map[string]string{dk: dv, "sha256": dv + "0", "\U0001F600": "x", "\uFB33": "y"}}}
		case 2:
			st.Subject = []receipt.Subject{{Name: name}, {Name: name + "2", Digest: map[string]string{}}}
		case 3:
			st.Subject = []receipt.Subject{}
		}
		want, werr := receipt.Canonical(st)
		got, gerr := st.Canonical()
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("general error %v, direct error %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("direct  %s\ngeneral %s", got, want)
		}
	})
}

// FuzzBundleFile checks the direct encoding of a bundle file against
// json.MarshalIndent, which it replaces byte for byte.
func FuzzBundleFile(f *testing.F) {
	f.Add("application/vnd.in-toto+json", []byte(`{"a":1}`), "0123abcd", []byte{1, 2, 3}, uint64(3), uint64(9), "ab12", 2)
	f.Add("t<>&\u2028\x00é\xff", []byte{}, "k\"e\\y", []byte(nil), uint64(0), uint64(1), "", 0)
	f.Fuzz(func(t *testing.T, payloadType string, payload []byte, keyID string, sig []byte, index, size uint64, hash string, n int) {
		env := &receipt.Envelope{PayloadType: payloadType, Payload: payload, Signatures: []receipt.Signature{{KeyID: keyID, Sig: sig}}}
		head := &receipt.Envelope{PayloadType: "application/vnd.svc.treehead+json", Payload: sig}
		if n&1 == 1 {
			head.Signatures = []receipt.Signature{{KeyID: hash, Sig: payload}, {KeyID: keyID, Sig: nil}}
		}
		b := &receipt.Bundle{Envelope: env, TreeHead: head, Inclusion: receipt.Inclusion{LeafIndex: index, TreeSize: size}}
		for i := range n % 5 {
			b.Inclusion.Hashes = append(b.Inclusion.Hashes, hash+strings.Repeat("0", i))
		}
		if n&8 != 0 {
			b.Inclusion.Hashes = []string{}
		}
		if n&16 != 0 {
			b.TreeHead = nil
		}
		want, err := json.MarshalIndent(b, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got, err := receipt.BundleFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("BundleFile:\n%s\nMarshalIndent:\n%s", got, want)
		}
	})
}
