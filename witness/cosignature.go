package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/signer"
)

// C2SP tlog-cosignature/v1 (https://c2sp.org/tlog-cosignature), Ed25519: a note
// signature line "— <name> base64(key id ‖ timestamp ‖ signature)" whose key id is
// SHA-256(<name> ‖ "\n" ‖ 0x04 ‖ public key)[:4], whose timestamp is 8 bytes big
// endian (seconds since the epoch), and whose Ed25519 signature is over
//
//	cosignature/v1
//	time <timestamp>
//	<the whole checkpoint body>
//
// golang.org/x/mod/sumdb/note verifies such lines through the Verifier below (its own
// NewVerifier knows only algorithm 0x01).

// algCosignatureV1 is the vkey algorithm byte of Ed25519 cosignatures.
const algCosignatureV1 = 0x04

// cosignatureLen is a cosignature's length: timestamp and Ed25519 signature.
const cosignatureLen = 8 + ed25519.SignatureSize

// CosignerKeyHash is the note key id of an Ed25519 cosigner.
func CosignerKeyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{algCosignatureV1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// CosignerVerifierKey is the vkey of an Ed25519 cosigner: <name>+<key id
// hex>+base64(0x04 ‖ public key), what a policy names a witness by.
func CosignerVerifierKey(name string, pub ed25519.PublicKey) string {
	return fmt.Sprintf("%s+%08x+%s", name, CosignerKeyHash(name, pub), base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, pub...)))
}

// cosignedMessage is what a cosignature at time ts signs over body.
func cosignedMessage(ts uint64, body []byte) []byte {
	return append([]byte("cosignature/v1\ntime "+strconv.FormatUint(ts, 10)+"\n"), body...)
}

// Cosigner makes tlog-cosignature/v1 lines with the witness key (a note.Signer).
type Cosigner struct {
	name string
	key  *signer.Key
	hash uint32
	now  func() time.Time
}

// NewCosigner is the cosigner called name with key; now is its clock (nil: time.Now).
func NewCosigner(name string, key *signer.Key, now func() time.Time) (*Cosigner, error) {
	if err := checkKeyName(name); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Cosigner{name: name, key: key, hash: CosignerKeyHash(name, key.Public().Key), now: now}, nil
}

// Name is the cosigner's name.
func (c *Cosigner) Name() string { return c.name }

// KeyHash is the cosigner's key id.
func (c *Cosigner) KeyHash() uint32 { return c.hash }

// VerifierKey is the cosigner's vkey.
func (c *Cosigner) VerifierKey() string { return CosignerVerifierKey(c.name, c.key.Public().Key) }

// Sign cosigns a checkpoint body as of now.
func (c *Cosigner) Sign(body []byte) ([]byte, error) {
	ts := uint64(c.now().Unix())
	out := binary.BigEndian.AppendUint64(nil, ts)
	return append(out, c.key.Sign(cosignedMessage(ts, body))...), nil
}

// CosignatureVerifier verifies one cosigner's tlog-cosignature/v1 lines (a
// note.Verifier); Time is the timestamp of the last signature it verified.
type CosignatureVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
	Time time.Time
}

// NewCosignatureVerifier parses a cosigner's vkey (algorithm 0x04).
func NewCosignatureVerifier(vkey string) (*CosignatureVerifier, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	hashHex, keyB64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 || checkKeyName(name) != nil {
		return nil, fmt.Errorf("cosigner key %q is not <name>+<key id>+<base64 key>", vkey)
	}
	h, err1 := strconv.ParseUint(hashHex, 16, 32)
	key, err2 := base64.StdEncoding.DecodeString(keyB64)
	switch {
	case err1 != nil || len(hashHex) != 8 || err2 != nil:
		return nil, fmt.Errorf("cosigner key %q: malformed key id or key", name)
	case len(key) != 1+ed25519.PublicKeySize || key[0] != algCosignatureV1:
		return nil, fmt.Errorf("cosigner key %q is not an Ed25519 cosignature/v1 key (algorithm 0x04)", name)
	}
	pub := ed25519.PublicKey(key[1:])
	if uint32(h) != CosignerKeyHash(name, pub) {
		return nil, fmt.Errorf("cosigner key %q: key id %s does not match its key", name, hashHex)
	}
	return &CosignatureVerifier{name: name, hash: uint32(h), pub: pub}, nil
}

// Name is the cosigner's name.
func (v *CosignatureVerifier) Name() string { return v.name }

// KeyHash is the cosigner's key id.
func (v *CosignatureVerifier) KeyHash() uint32 { return v.hash }

// Verify checks a cosignature over a checkpoint body.
func (v *CosignatureVerifier) Verify(body, sig []byte) bool {
	if len(sig) != cosignatureLen {
		return false
	}
	ts := binary.BigEndian.Uint64(sig)
	if ts > 1<<63-1 || !ed25519.Verify(v.pub, cosignedMessage(ts, body), sig[8:]) {
		return false
	}
	v.Time = time.Unix(int64(ts), 0)
	return true
}

// checkKeyName: a note key name is non-empty, without spaces or plus signs.
func checkKeyName(name string) error {
	if name == "" || strings.ContainsAny(name, " +\n\t") {
		return fmt.Errorf("key name %q must be non-empty, without spaces or '+'", name)
	}
	return nil
}

// signatureLines is the signature part of a signed note: what follows its body and
// the blank line.
func signatureLines(signed []byte, body string) ([]byte, error) {
	rest, ok := bytes.CutPrefix(signed, []byte(body+"\n"))
	if !ok {
		return nil, errors.New("signed note does not start with its body")
	}
	return rest, nil
}

var (
	_ note.Signer   = (*Cosigner)(nil)
	_ note.Verifier = (*CosignatureVerifier)(nil)
)
