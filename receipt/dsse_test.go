package receipt_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// sslVerifier adapts an Ed25519 public key to go-securesystemslib's dsse.Verifier.
// It reports the keyid SPEC.md defines; the library's own fallback
// (dsse.SHA256KeyID) is an SSH fingerprint, a different scheme.
type sslVerifier struct {
	pub   ed25519.PublicKey
	keyID string
}

func (v sslVerifier) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(v.pub, data, sig) {
		return errors.New("ed25519: invalid signature")
	}
	return nil
}
func (v sslVerifier) KeyID() (string, error)   { return v.keyID, nil }
func (v sslVerifier) Public() crypto.PublicKey { return v.pub }

// sslSigner is an Ed25519 dsse.Signer written here, independent of package signer.
type sslSigner struct {
	priv  ed25519.PrivateKey
	keyID string
}

func (s sslSigner) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, data), nil
}
func (s sslSigner) KeyID() (string, error) { return s.keyID, nil }

// spkiKeyID computes SPEC.md's keyid with the standard library only.
func spkiKeyID(t testing.TB, pub ed25519.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

func toSSL(t *testing.T, e *receipt.Envelope) *dsse.Envelope {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var out dsse.Envelope
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func sslVerify(t *testing.T, e *dsse.Envelope, keys ...*signer.Key) ([]dsse.AcceptedKey, []byte, error) {
	t.Helper()
	var vs []dsse.Verifier
	for _, k := range keys {
		vs = append(vs, sslVerifier{pub: k.Public().Key, keyID: spkiKeyID(t, k.Public().Key)})
	}
	ev, err := dsse.NewEnvelopeVerifier(vs...)
	if err != nil {
		t.Fatal(err)
	}
	return ev.VerifyAndDecode(context.Background(), e)
}

// The test vector of the DSSE specification (protocol.md).
func TestPAEVector(t *testing.T) {
	got := receipt.PAE("http://example.com/HelloWorld", []byte("hello world"))
	want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if string(got) != want {
		t.Errorf("PAE = %q, want %q", got, want)
	}
	// Lengths are in bytes, not characters; empty parts keep their separators.
	if got, want := string(receipt.PAE("t\u00e9", []byte("\u20ac"))), "DSSEv1 3 t\u00e9 3 \u20ac"; got != want {
		t.Errorf("PAE non-ASCII = %q, want %q", got, want)
	}
	if got, want := string(receipt.PAE("", nil)), "DSSEv1 0  0 "; got != want {
		t.Errorf("PAE empty = %q, want %q", got, want)
	}
	// Same bytes as go-securesystemslib's PAE.
	for _, c := range []struct{ typ, payload string }{{receipt.PayloadInToto, `{"a":1}`}, {"x", strings.Repeat("z", 1000)}} {
		if !bytes.Equal(receipt.PAE(c.typ, []byte(c.payload)), dsse.PAE(c.typ, []byte(c.payload))) {
			t.Errorf("PAE differs from go-securesystemslib for %q", c.typ)
		}
	}
}

func TestSignVerify(t *testing.T) {
	k := testKey(t, 1)
	payload := []byte(`{"hello":"world"}`)
	e := receipt.Sign(receipt.PayloadInToto, payload, k)
	if len(e.Signatures) != 1 || e.Signatures[0].KeyID != k.KeyID() {
		t.Fatalf("signatures = %+v", e.Signatures)
	}
	// The signature is Ed25519 over the PAE of the raw payload (checked with crypto/ed25519).
	if !ed25519.Verify(k.Public().Key, []byte("DSSEv1 28 application/vnd.in-toto+json 17 "+string(payload)), e.Signatures[0].Sig) {
		t.Error("signature is not Ed25519 over the PAE")
	}
	got, err := e.Verify([]signer.PublicKey{k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyID != k.KeyID() {
		t.Errorf("Verify returned %s", got.KeyID)
	}
	if _, err := e.Verify([]signer.PublicKey{testKey(t, 2).Public()}); !errors.Is(err, receipt.ErrNoTrustedSignature) {
		t.Errorf("untrusted key: err = %v", err)
	}
	if _, err := e.Verify(nil); !errors.Is(err, receipt.ErrNoTrustedSignature) {
		t.Errorf("no trusted keys: err = %v", err)
	}
	// JSON wire form: standard base64 for payload and sig.
	var wire struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
	}
	data, _ := json.Marshal(e)
	if err := json.Unmarshal(data, &wire); err != nil {
		t.Fatal(err)
	}
	if wire.Payload != base64.StdEncoding.EncodeToString(payload) || wire.PayloadType != receipt.PayloadInToto ||
		wire.Signatures[0].Sig != base64.StdEncoding.EncodeToString(e.Signatures[0].Sig) {
		t.Errorf("wire form = %s", data)
	}
	// The canonical envelope (the log leaf) is exactly the RFC 8785 text.
	if got, want := e.Canonical(), envelopeCanonicalByHand(e); !bytes.Equal(got, want) {
		t.Errorf("Canonical = %s\nwant        %s", got, want)
	}
	// An unsigned envelope has an empty list, not null.
	if c := receipt.Sign("t", []byte("x")).Canonical(); !bytes.HasSuffix(c, []byte(`"signatures":[]}`)) {
		t.Errorf("unsigned envelope = %s", c)
	}
}

// DESIGN.md: envelopes verify with go-securesystemslib.
func TestEnvelopeVerifiesWithGoSecureSystemsLib(t *testing.T) {
	k := testKey(t, 1)
	payload := []byte(`{"_type":"https://in-toto.io/Statement/v1"}`)
	e := receipt.Sign(receipt.PayloadInToto, payload, k)

	accepted, body, err := sslVerify(t, toSSL(t, e), k)
	if err != nil {
		t.Fatalf("go-securesystemslib rejects our envelope: %v", err)
	}
	if len(accepted) != 1 || accepted[0].KeyID != k.KeyID() {
		t.Errorf("accepted = %+v", accepted)
	}
	if !bytes.Equal(body, payload) {
		t.Errorf("decoded payload = %q", body)
	}
	// A tree head and a grant too.
	th, err := receipt.SignTreeHead(k, 3, strings.Repeat("ab", 32), timeAt(0), "log-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sslVerify(t, toSSL(t, th), k); err != nil {
		t.Errorf("tree head: %v", err)
	}

	// Their verifier refuses the same tamperings ours does.
	tampered := toSSL(t, e)
	tampered.PayloadType = receipt.PayloadTreeHead
	if _, _, err := sslVerify(t, tampered, k); err == nil {
		t.Error("go-securesystemslib accepted a changed payloadType")
	}
	tampered = toSSL(t, e)
	tampered.Payload = base64.StdEncoding.EncodeToString(append([]byte(nil), append(payload, ' ')...))
	if _, _, err := sslVerify(t, tampered, k); err == nil {
		t.Error("go-securesystemslib accepted a changed payload")
	}
	if _, _, err := sslVerify(t, toSSL(t, e), testKey(t, 2)); err == nil {
		t.Error("go-securesystemslib accepted a signature by an untrusted key")
	}
}

func TestEnvelopeFromGoSecureSystemsLibVerifies(t *testing.T) {
	k := testKey(t, 3)
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := signer.NewKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	// A signer built on crypto/ed25519 directly, with the seed of k.
	es, err := dsse.NewEnvelopeSigner(
		sslSigner{priv: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32)), keyID: spkiKeyID(t, k.Public().Key)},
		sslSigner{priv: priv, keyID: spkiKeyID(t, priv.Public().(ed25519.PublicKey))},
	)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"treeSize":1}`)
	theirs, err := es.SignPayload(context.Background(), receipt.PayloadTreeHead, payload)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(theirs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := receipt.ParseEnvelope(data)
	if err != nil {
		t.Fatalf("ParseEnvelope of a go-securesystemslib envelope: %v\n%s", err, data)
	}
	if !bytes.Equal(e.Payload, payload) || e.PayloadType != receipt.PayloadTreeHead {
		t.Errorf("parsed %q %q", e.PayloadType, e.Payload)
	}
	got, err := e.Verify([]signer.PublicKey{k.Public()})
	if err != nil || got.KeyID != k.KeyID() {
		t.Fatalf("Verify = %s, %v", got.KeyID, err)
	}
	if n := len(e.VerifiedBy([]signer.PublicKey{k.Public(), other.Public(), testKey(t, 9).Public()})); n != 2 {
		t.Errorf("VerifiedBy found %d keys, want 2", n)
	}
	// Re-marshalled by us, it still verifies with their verifier (byte-identical form).
	if _, _, err := sslVerify(t, toSSL(t, e), k); err != nil {
		t.Errorf("round trip: %v", err)
	}
	if again, _ := json.Marshal(e); !bytes.Equal(again, data) {
		t.Errorf("our marshalling differs from theirs:\n%s\n%s", again, data)
	}
}

func TestMultiSignature(t *testing.T) {
	k1, k2, k3 := testKey(t, 1), testKey(t, 2), testKey(t, 3)
	e := receipt.Sign(receipt.PayloadTreeHead, []byte(`{"treeSize":5}`), k1)
	e.AddSignature(k2)
	e.AddSignature(k2) // a key that already signed is not added twice
	e.AddSignature(k1)
	if len(e.Signatures) != 2 {
		t.Fatalf("%d signatures, want 2", len(e.Signatures))
	}
	if e.Signatures[0].KeyID != k1.KeyID() || e.Signatures[1].KeyID != k2.KeyID() {
		t.Errorf("signature order: %s, %s", e.Signatures[0].KeyID, e.Signatures[1].KeyID)
	}
	// A third, untrusted-but-present key is not required and not reported.
	if _, err := e.Verify([]signer.PublicKey{k3.Public()}); !errors.Is(err, receipt.ErrNoTrustedSignature) {
		t.Errorf("k3 only: %v", err)
	}
	if got, err := e.Verify([]signer.PublicKey{k3.Public(), k2.Public()}); err != nil || got.KeyID != k2.KeyID() {
		t.Errorf("k3,k2: %s %v", got.KeyID, err)
	}
	got := e.VerifiedBy([]signer.PublicKey{k3.Public(), k2.Public(), k1.Public()})
	if len(got) != 2 || got[0].KeyID != k2.KeyID() || got[1].KeyID != k1.KeyID() {
		t.Errorf("VerifiedBy = %v", got)
	}
	if got := e.VerifiedBy([]signer.PublicKey{k3.Public()}); len(got) != 0 {
		t.Errorf("VerifiedBy(k3) = %v", got)
	}
	// Sign with several keys at once gives the same envelope.
	e2 := receipt.Sign(receipt.PayloadTreeHead, []byte(`{"treeSize":5}`), k1, k2)
	if !bytes.Equal(e.Canonical(), e2.Canonical()) {
		t.Error("Sign(k1,k2) differs from Sign(k1)+AddSignature(k2)")
	}
	// go-securesystemslib with a threshold of two accepts the pair.
	ev, err := dsse.NewMultiEnvelopeVerifier(2,
		sslVerifier{pub: k1.Public().Key, keyID: k1.KeyID()},
		sslVerifier{pub: k2.Public().Key, keyID: k2.KeyID()},
		sslVerifier{pub: k3.Public().Key, keyID: k3.KeyID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Verify(context.Background(), toSSL(t, e)); err != nil {
		t.Errorf("threshold 2: %v", err)
	}
	// A countersignature over a tampered payload no longer verifies for either key.
	e.Payload = []byte(`{"treeSize":6}`)
	if got := e.VerifiedBy([]signer.PublicKey{k1.Public(), k2.Public()}); len(got) != 0 {
		t.Errorf("tampered payload verified by %v", got)
	}
}

func TestTamperingFailsVerification(t *testing.T) {
	k := testKey(t, 1)
	trusted := []signer.PublicKey{k.Public()}
	fresh := func() *receipt.Envelope {
		return receipt.Sign(receipt.PayloadInToto, []byte(`{"predicate":{"decision":"allow"}}`), k)
	}
	mutations := map[string]func(e *receipt.Envelope){
		"payloadType":        func(e *receipt.Envelope) { e.PayloadType = receipt.PayloadDelegation },
		"payloadType suffix": func(e *receipt.Envelope) { e.PayloadType += " " },
		"payload byte":       func(e *receipt.Envelope) { e.Payload[len(e.Payload)-3] ^= 0x01 },
		"payload appended":   func(e *receipt.Envelope) { e.Payload = append(e.Payload, ' ') },
		"payload truncated":  func(e *receipt.Envelope) { e.Payload = e.Payload[:len(e.Payload)-1] },
		"sig byte":           func(e *receipt.Envelope) { e.Signatures[0].Sig[0] ^= 0x80 },
		"sig last byte":      func(e *receipt.Envelope) { e.Signatures[0].Sig[63] ^= 0x01 },
		"sig truncated":      func(e *receipt.Envelope) { e.Signatures[0].Sig = e.Signatures[0].Sig[:63] },
		"sig empty":          func(e *receipt.Envelope) { e.Signatures[0].Sig = nil },
		"keyid other key":    func(e *receipt.Envelope) { e.Signatures[0].KeyID = testKey(t, 2).KeyID() },
		"keyid upper case":   func(e *receipt.Envelope) { e.Signatures[0].KeyID = strings.ToUpper(e.Signatures[0].KeyID) },
		"keyid empty":        func(e *receipt.Envelope) { e.Signatures[0].KeyID = "" },
		"no signatures":      func(e *receipt.Envelope) { e.Signatures = nil },
		"signature by another": func(e *receipt.Envelope) {
			e.Signatures = receipt.Sign(e.PayloadType, e.Payload, testKey(t, 2)).Signatures
		},
	}
	if _, err := fresh().Verify(trusted); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range mutations {
		e := fresh()
		mutate(e)
		if _, err := e.Verify(trusted); !errors.Is(err, receipt.ErrNoTrustedSignature) {
			t.Errorf("%s: Verify err = %v, want ErrNoTrustedSignature", name, err)
		}
		if got := e.VerifiedBy(trusted); len(got) != 0 {
			t.Errorf("%s: VerifiedBy = %v", name, got)
		}
	}
	// The same through JSON: edit one base64 character of each field.
	data, _ := json.Marshal(fresh())
	var raw map[string]any
	_ = json.Unmarshal(data, &raw)
	payloadB64 := raw["payload"].(string)
	sigB64 := raw["signatures"].([]any)[0].(map[string]any)["sig"].(string)
	for name, edited := range map[string]string{
		"payload": strings.Replace(string(data), payloadB64, flipB64(payloadB64), 1),
		"sig":     strings.Replace(string(data), sigB64, flipB64(sigB64), 1),
	} {
		e, err := receipt.ParseEnvelope([]byte(edited))
		if err != nil {
			continue // refused at parse time is fine
		}
		if _, err := e.Verify(trusted); err == nil {
			t.Errorf("edited %s verifies", name)
		}
	}
}

// flipB64 changes the first base64 character to another one.
func flipB64(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func validEnvelopeJSON(t testing.TB) []byte {
	t.Helper()
	data, err := json.Marshal(receipt.Sign(receipt.PayloadInToto, []byte("hi"), testKey(t, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseEnvelope(t *testing.T) {
	k := testKey(t, 1)
	data := validEnvelopeJSON(t)
	e, err := receipt.ParseEnvelope(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Payload) != "hi" || e.PayloadType != receipt.PayloadInToto {
		t.Errorf("parsed %+v", e)
	}
	if _, err := e.Verify([]signer.PublicKey{k.Public()}); err != nil {
		t.Error(err)
	}
	sig := base64.StdEncoding.EncodeToString(e.Signatures[0].Sig)
	kid := e.Signatures[0].KeyID
	env := func(payload, sigs string) string {
		return `{"payloadType":"t","payload":` + payload + `,"signatures":` + sigs + `}`
	}
	oneSig := `[{"keyid":"` + kid + `","sig":"` + sig + `"}]`

	if _, err := receipt.ParseEnvelope([]byte(env(`"aGk="`, oneSig))); err != nil {
		t.Errorf("canonical base64 refused: %v", err)
	}
	// Whitespace around the value is not trailing data.
	if _, err := receipt.ParseEnvelope(append(append([]byte(" \n"), data...), " \r\n\t"...)); err != nil {
		t.Errorf("surrounding whitespace refused: %v", err)
	}
	bad := map[string]string{
		"non-zero trailing bits":     env(`"aGl="`, oneSig),
		"non-zero trailing bits sig": env(`"aGk="`, `[{"keyid":"`+kid+`","sig":"`+sig[:len(sig)-3]+`B=="}]`),
		"missing padding":            env(`"aGk"`, oneSig),
		"url alphabet":               env(`"-_8="`, oneSig),
		"not base64":                 env(`"a*k="`, oneSig),
		"payload is a number":        env(`12`, oneSig),
		"unknown top-level field":    `{"payloadType":"t","payload":"aGk=","signatures":` + oneSig + `,"extra":1}`,
		"unknown signature field":    env(`"aGk="`, `[{"keyid":"`+kid+`","sig":"`+sig+`","cert":"x"}]`),
		"empty payloadType":          `{"payloadType":"","payload":"aGk=","signatures":` + oneSig + `}`,
		"missing payloadType":        `{"payload":"aGk=","signatures":` + oneSig + `}`,
		"missing signatures":         `{"payloadType":"t","payload":"aGk="}`,
		"null signatures":            env(`"aGk="`, `null`),
		"signature without keyid":    env(`"aGk="`, `[{"sig":"`+sig+`"}]`),
		"signature with empty sig":   env(`"aGk="`, `[{"keyid":"`+kid+`","sig":""}]`),
		"trailing value":             string(data) + `{}`,
		"trailing garbage":           string(data) + ` x`,
		"trailing comma":             string(data) + `,`,
		"array":                      `[` + string(data) + `]`,
		"empty":                      ``,
		"null":                       `null`,
	}
	for name, in := range bad {
		if got, err := receipt.ParseEnvelope([]byte(in)); err == nil {
			t.Errorf("%s: accepted %q as %+v", name, in, got)
		}
	}
}

// Base64's doc comment: "no two encodings name the same bytes". Go's base64
// decoder skips CR and LF even in Strict mode, so these must be refused
// explicitly.
func TestParseEnvelopeRefusesLineBreaksInBase64(t *testing.T) {
	kid := testKey(t, 1).KeyID()
	for _, payload := range []string{`"aG\nk="`, `"aGk=\r\n"`, `"\naGk="`, `"aG\r\nk="`} {
		in := `{"payloadType":"t","payload":` + payload + `,"signatures":[{"keyid":"` + kid + `","sig":"aGk="}]}`
		if e, err := receipt.ParseEnvelope([]byte(in)); err == nil {
			t.Errorf("payload %s accepted (decoded to %q): a second encoding of the same bytes", payload, e.Payload)
		}
	}
}

func TestParseEnvelopeSizeCap(t *testing.T) {
	data := validEnvelopeJSON(t)
	atLimit := append(append([]byte(nil), data...), bytes.Repeat([]byte(" "), receipt.MaxEnvelopeSize-len(data))...)
	if _, err := receipt.ParseEnvelope(atLimit); err != nil {
		t.Errorf("envelope of exactly MaxEnvelopeSize bytes refused: %v", err)
	}
	over := append(atLimit, ' ')
	_, err := receipt.ParseEnvelope(over)
	if err == nil {
		t.Fatal("envelope over MaxEnvelopeSize accepted")
	}
	if !strings.Contains(err.Error(), "limit") {
		t.Errorf("error does not name the limit: %v", err)
	}
}

func TestDecodePayload(t *testing.T) {
	k := testKey(t, 1)
	e, err := receipt.SignJSON(receipt.PayloadTreeHead, receipt.TreeHead{TreeSize: 2, RootHash: strings.Repeat("0", 64), Timestamp: "2026-11-22T01:02:03.456Z"}, k)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Payload) != `{"rootHash":"`+strings.Repeat("0", 64)+`","timestamp":"2026-11-22T01:02:03.456Z","treeSize":2}` {
		t.Errorf("SignJSON payload is not canonical: %s", e.Payload)
	}
	var th receipt.TreeHead
	if err := e.DecodePayload(receipt.PayloadInToto, &th); !errors.Is(err, receipt.ErrPayloadType) {
		t.Errorf("wrong type: %v", err)
	}
	if err := e.DecodePayload(receipt.PayloadTreeHead, &th); err != nil || th.TreeSize != 2 {
		t.Errorf("DecodePayload = %+v, %v", th, err)
	}
	// Strict: an unknown field in a payload is refused.
	e2 := receipt.Sign(receipt.PayloadTreeHead, []byte(`{"treeSize":2,"rootHash":"`+strings.Repeat("0", 64)+`","timestamp":"2026-11-22T01:02:03.456Z","extra":1}`), k)
	if err := e2.DecodePayload(receipt.PayloadTreeHead, &th); err == nil {
		t.Error("unknown payload field accepted")
	}
	if _, err := receipt.DecodeStatement(e); !errors.Is(err, receipt.ErrPayloadType) {
		t.Errorf("DecodeStatement of a tree head: %v", err)
	}
}

func TestTreeHead(t *testing.T) {
	k := testKey(t, 1)
	root := strings.Repeat("ab", 32)
	e, err := receipt.SignTreeHead(k, 7, root, timeAt(1500), "")
	if err != nil {
		t.Fatal(err)
	}
	if e.PayloadType != "application/vnd.svc.treehead+json" {
		t.Errorf("payloadType = %s", e.PayloadType)
	}
	want := `{"rootHash":"` + root + `","timestamp":"2026-11-22T00:00:01.500Z","treeSize":7}`
	if string(e.Payload) != want {
		t.Errorf("payload = %s\nwant      %s", e.Payload, want)
	}
	th, err := receipt.DecodeTreeHead(e)
	if err != nil || th.TreeSize != 7 || th.RootHash != root || th.Log != "" {
		t.Errorf("DecodeTreeHead = %+v, %v", th, err)
	}
	e, _ = receipt.SignTreeHead(k, 7, root, timeAt(0), "tenant-a")
	if th, err := receipt.DecodeTreeHead(e); err != nil || th.Log != "tenant-a" {
		t.Errorf("log = %+v, %v", th, err)
	}
	for name, payload := range map[string]string{
		"short root":   `{"rootHash":"abcd","timestamp":"2026-11-22T00:00:01.500Z","treeSize":7}`,
		"bad time":     `{"rootHash":"` + root + `","timestamp":"yesterday","treeSize":7}`,
		"unknown":      `{"rootHash":"` + root + `","timestamp":"2026-11-22T00:00:01.500Z","treeSize":7,"x":1}`,
		"negative":     `{"rootHash":"` + root + `","timestamp":"2026-11-22T00:00:01.500Z","treeSize":-1}`,
		"string size":  `{"rootHash":"` + root + `","timestamp":"2026-11-22T00:00:01.500Z","treeSize":"7"}`,
		"not json":     `treeSize=7`,
		"wrong object": `[]`,
	} {
		if _, err := receipt.DecodeTreeHead(receipt.Sign(receipt.PayloadTreeHead, []byte(payload), k)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := receipt.DecodeTreeHead(receipt.Sign(receipt.PayloadInToto, []byte(want), k)); !errors.Is(err, receipt.ErrPayloadType) {
		t.Errorf("wrong payload type: %v", err)
	}
}

func TestParseBundle(t *testing.T) {
	k := testKey(t, 1)
	env := receipt.Sign(receipt.PayloadInToto, []byte(`{}`), k)
	th, _ := receipt.SignTreeHead(k, 1, strings.Repeat("00", 32), timeAt(0), "")
	good, err := json.Marshal(receipt.Bundle{Envelope: env, TreeHead: th, Inclusion: receipt.Inclusion{LeafIndex: 0, TreeSize: 1, Hashes: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := receipt.ParseBundle(good)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Envelope.Canonical(), env.Canonical()) || !bytes.Equal(b.TreeHead.Canonical(), th.Canonical()) || b.Inclusion.TreeSize != 1 {
		t.Errorf("round trip: %+v", b)
	}
	envJSON, _ := json.Marshal(env)
	thJSON, _ := json.Marshal(th)
	incl := `{"leafIndex":0,"treeSize":1,"hashes":[]}`
	bad := map[string]string{
		"missing envelope":        `{"treeHead":` + string(thJSON) + `,"inclusion":` + incl + `}`,
		"null envelope":           `{"envelope":null,"treeHead":` + string(thJSON) + `,"inclusion":` + incl + `}`,
		"missing treeHead":        `{"envelope":` + string(envJSON) + `,"inclusion":` + incl + `}`,
		"envelope without type":   `{"envelope":{"payload":"e30=","signatures":[]},"treeHead":` + string(thJSON) + `,"inclusion":` + incl + `}`,
		"treeHead without sigs":   `{"envelope":` + string(envJSON) + `,"treeHead":{"payloadType":"t","payload":"e30="},"inclusion":` + incl + `}`,
		"unknown field":           `{"envelope":` + string(envJSON) + `,"treeHead":` + string(thJSON) + `,"inclusion":` + incl + `,"note":"x"}`,
		"unknown inclusion field": `{"envelope":` + string(envJSON) + `,"treeHead":` + string(thJSON) + `,"inclusion":{"leafIndex":0,"treeSize":1,"hashes":[],"root":"x"}}`,
		"negative leaf index":     `{"envelope":` + string(envJSON) + `,"treeHead":` + string(thJSON) + `,"inclusion":{"leafIndex":-1,"treeSize":1,"hashes":[]}}`,
		"trailing data":           string(good) + `x`,
		"not an object":           `"bundle"`,
	}
	for name, in := range bad {
		if _, err := receipt.ParseBundle([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	over := append(append([]byte(nil), good...), bytes.Repeat([]byte(" "), receipt.MaxBundleSize)...)
	if _, err := receipt.ParseBundle(over); err == nil {
		t.Error("bundle over MaxBundleSize accepted")
	}
}

// unmarshalStrict promises to reject trailing data. encoding/json's
// Decoder.More reports false before a stray ']' or '}', and Decoder.Token then
// fails on it, which the check takes as "no more input".
func TestParsersRefuseTrailingClosers(t *testing.T) {
	k := testKey(t, 1)
	envJSON := validEnvelopeJSON(t)
	th, _ := receipt.SignTreeHead(k, 1, strings.Repeat("00", 32), timeAt(0), "")
	bundleJSON, _ := json.Marshal(receipt.Bundle{Envelope: receipt.Sign(receipt.PayloadInToto, []byte(`{}`), k), TreeHead: th,
		Inclusion: receipt.Inclusion{TreeSize: 1, Hashes: []string{}}})
	for _, trail := range []string{"]", "}", " ]", "\n}", "]]]"} {
		if _, err := receipt.ParseEnvelope(append(append([]byte(nil), envJSON...), trail...)); err == nil {
			t.Errorf("ParseEnvelope accepted trailing %q", trail)
		}
		if _, err := receipt.ParseBundle(append(append([]byte(nil), bundleJSON...), trail...)); err == nil {
			t.Errorf("ParseBundle accepted trailing %q", trail)
		}
		grant := receipt.Sign(receipt.PayloadDelegation, []byte(`{"version":"0.1","principal":"alice","agent":"a","scopes":[],`+
			`"issuedAt":"2026-11-21T00:00:00Z","expiresAt":"2026-11-23T00:00:00Z"}`+trail), k)
		if _, err := receipt.DecodeGrant(grant); err == nil {
			t.Errorf("DecodeGrant accepted a payload with trailing %q", trail)
		}
	}
}

// DecodeTreeHead checks the head's form: a rootHash of 64 lowercase hex digits
// (receipt.IsDigestHex).
func TestDecodeTreeHeadRequiresHexRoot(t *testing.T) {
	k := testKey(t, 1)
	for _, root := range []string{strings.Repeat("z", 64), strings.Repeat("0", 62) + "g0", strings.Repeat("é", 32), strings.Repeat("AB", 32)} {
		e := receipt.Sign(receipt.PayloadTreeHead, []byte(`{"rootHash":"`+root+`","timestamp":"2026-11-22T00:00:01.500Z","treeSize":7}`), k)
		if th, err := receipt.DecodeTreeHead(e); err == nil {
			t.Errorf("rootHash %q accepted: %+v", root, th)
		}
	}
}

func TestSignTreeHeadWithKeySigner(t *testing.T) {
	k := testKey(t, 4)
	root := strings.Repeat("cd", 32)
	s := receipt.KeySigner{Key: k}
	if s.KeyID() != k.KeyID() {
		t.Errorf("KeySigner.KeyID = %s", s.KeyID())
	}
	viaSigner, err := receipt.SignTreeHeadWith(context.Background(), s, 9, root, timeAt(7), "l")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := receipt.SignTreeHead(k, 9, root, timeAt(7), "l")
	if err != nil {
		t.Fatal(err)
	}
	// Ed25519 is deterministic, so both paths give the same envelope.
	if !bytes.Equal(viaSigner.Canonical(), direct.Canonical()) {
		t.Errorf("SignTreeHeadWith = %s\nSignTreeHead    = %s", viaSigner.Canonical(), direct.Canonical())
	}
	if len(viaSigner.Signatures) != 1 || viaSigner.Signatures[0].KeyID != k.KeyID() {
		t.Errorf("signatures = %+v", viaSigner.Signatures)
	}
	th, err := receipt.DecodeTreeHead(viaSigner)
	if err != nil || th.TreeSize != 9 || th.Log != "l" || th.Timestamp != "2026-11-22T00:00:00.007Z" {
		t.Errorf("head = %+v, %v", th, err)
	}
}
