package receipt

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
)

// Media types (DSSE payloadType values) fixed by SPEC.md.
const (
	PayloadInToto     = "application/vnd.in-toto+json"
	PayloadTreeHead   = "application/vnd.svc.treehead+json"
	PayloadDelegation = "application/vnd.svc.delegation+json"
	PayloadUpstream   = "application/vnd.svc.upstream+json"
)

// MaxEnvelopeSize caps a parsed envelope; a receipt with a large result is well under it.
const MaxEnvelopeSize = 8 << 20

// Envelope is a DSSE envelope. Payload holds the raw payload bytes; JSON carries them
// as standard base64.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     Base64      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one DSSE signature, matched to a key by KeyID.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   Base64 `json:"sig"`
}

// Base64 is bytes carried in JSON as standard, padded base64, decoded strictly: a
// string whose unused trailing bits are not zero is refused, so no two encodings name
// the same bytes and an edited character never goes unnoticed.
type Base64 []byte

// MarshalJSON writes standard base64.
func (b Base64) MarshalJSON() ([]byte, error) {
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, b) // the alphabet needs no JSON escaping
	return append(out, '"'), nil
}

// UnmarshalJSON reads strict standard base64.
func (b *Base64) UnmarshalJSON(data []byte) error {
	if raw, ok := plainBase64(data); ok {
		// A JSON string of base64 characters only: its content is the string itself
		// and holds no line breaks for the decoder to skip, so decoding it strictly is
		// all the slow path below checks (with the same errors).
		out := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
		n, err := base64.StdEncoding.Strict().Decode(out, raw)
		if err != nil {
			return fmt.Errorf("base64 field: %w", err)
		}
		*b = out[:n]
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("base64 field: %w", err)
	}
	out, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return fmt.Errorf("base64 field: %w", err)
	}
	if base64.StdEncoding.EncodeToString(out) != s {
		// The decoder skips line breaks; one encoding per byte string only.
		return errors.New("base64 field: not in canonical form (line breaks or other noise)")
	}
	*b = out
	return nil
}

// plainBase64 returns the content of data when it is a JSON string made only of the
// standard base64 alphabet and padding.
func plainBase64(data []byte) ([]byte, bool) {
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return nil, false
	}
	raw := data[1 : len(data)-1]
	for _, c := range raw {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, false
		}
	}
	return raw, true
}

// Errors returned by envelope verification; test with errors.Is.
var (
	// ErrNoTrustedSignature: no signature on the envelope verifies against a trusted key.
	ErrNoTrustedSignature = errors.New("no signature verifies against a trusted key")
	// ErrPayloadType: the envelope's payloadType is not the one expected.
	ErrPayloadType = errors.New("unexpected payload type")
)

// PAE is the DSSE pre-authentication encoding:
// "DSSEv1" SP len(type) SP type SP len(payload) SP payload, over the raw payload bytes.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payloadType) + len(payload) + 32)
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// Sign makes an envelope over payload signed by every key given, in order.
func Sign(payloadType string, payload []byte, keys ...*signer.Key) *Envelope {
	e := &Envelope{PayloadType: payloadType, Payload: payload, Signatures: []Signature{}}
	for _, k := range keys {
		e.AddSignature(k)
	}
	return e
}

// SignJSON signs the canonical JSON of v.
func SignJSON(payloadType string, v any, keys ...*signer.Key) (*Envelope, error) {
	payload, err := Canonical(v)
	if err != nil {
		return nil, err
	}
	return Sign(payloadType, payload, keys...), nil
}

// AddSignature appends k's signature (a witness countersigning a checkpoint does this).
// A key that already signed is not added twice.
func (e *Envelope) AddSignature(k *signer.Key) {
	for _, s := range e.Signatures {
		if s.KeyID == k.KeyID() {
			return
		}
	}
	e.Signatures = append(e.Signatures, Signature{KeyID: k.KeyID(), Sig: k.Sign(PAE(e.PayloadType, e.Payload))})
}

// Verify returns the first trusted key that produced a valid signature on e, matching
// signatures to keys by keyid. It returns ErrNoTrustedSignature when none does.
func (e *Envelope) Verify(trusted []signer.PublicKey) (signer.PublicKey, error) {
	msg := PAE(e.PayloadType, e.Payload)
	for _, k := range trusted {
		for _, s := range e.Signatures {
			if s.KeyID == k.KeyID && k.Verify(msg, s.Sig) {
				return k, nil
			}
		}
	}
	return signer.PublicKey{}, ErrNoTrustedSignature
}

// VerifiedBy returns every trusted key with a valid signature on e, in trusted order.
func (e *Envelope) VerifiedBy(trusted []signer.PublicKey) []signer.PublicKey {
	msg := PAE(e.PayloadType, e.Payload)
	var out []signer.PublicKey
	for _, k := range trusted {
		for _, s := range e.Signatures {
			if s.KeyID == k.KeyID && k.Verify(msg, s.Sig) {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// Canonical returns the canonical JSON of the envelope: the receipt's log leaf.
func (e *Envelope) Canonical() []byte {
	if c, ok := e.appendCanonical(make([]byte, 0, 64+base64.StdEncoding.EncodedLen(len(e.Payload))+len(e.Signatures)*160)); ok {
		return c
	}
	c, err := Canonical(e)
	if err != nil {
		panic(err) // an Envelope holds only strings and bytes
	}
	return c
}

// LeafHash is the envelope's leaf hash in a log, merkle.LeafHash(e.Canonical()),
// written in a lent buffer: a batch verifier hashes a receipt of kilobytes for every
// bundle.
func (e *Envelope) LeafHash() merkle.Hash {
	bp := scratchBufs.Get().(*[]byte)
	b := append((*bp)[:0], 0) // RFC 6962's leaf prefix
	if c, ok := e.appendCanonical(b); ok {
		b = c
	} else {
		b = append(b, e.Canonical()...)
	}
	h := merkle.Hash(sha256.Sum256(b))
	putScratch(bp, b)
	return h
}

// appendCanonical writes the RFC 8785 form of e directly (members sorted: payload,
// payloadType, signatures; keyid, sig), which is what Canonical(e) computes, without
// a JSON round trip through a general canonicalizer; a receipt's payload is kilobytes
// of base64. It declines (false) strings that are not valid UTF-8, which encoding/json
// would rewrite.
func (e *Envelope) appendCanonical(b []byte) ([]byte, bool) {
	if !utf8.ValidString(e.PayloadType) {
		return nil, false
	}
	b = append(b, `{"payload":"`...)
	b = base64.StdEncoding.AppendEncode(b, e.Payload)
	b = append(b, `","payloadType":`...)
	b = appendJCSString(b, e.PayloadType)
	b = append(b, `,"signatures":`...)
	return e.appendSignatures(b, utf8.ValidString)
}

// appendJSON writes e as encoding/json does (fields in struct order), and declines
// (false) strings it would escape differently: invalid UTF-8, <, >, &, U+2028, U+2029.
func (e *Envelope) appendJSON(b []byte) ([]byte, bool) {
	if e == nil {
		return append(b, "null"...), true
	}
	if !plainJSONString(e.PayloadType) {
		return b, false
	}
	b = append(b, `{"payloadType":`...)
	b = appendJCSString(b, e.PayloadType)
	b = append(b, `,"payload":"`...)
	b = base64.StdEncoding.AppendEncode(b, e.Payload)
	b = append(b, `","signatures":`...)
	return e.appendSignatures(b, plainJSONString)
}

// appendSignatures ends an envelope written by appendCanonical or appendJSON (the
// members of a signature are in the same order in both); a key id that plain refuses
// declines it.
func (e *Envelope) appendSignatures(b []byte, plain func(string) bool) ([]byte, bool) {
	if e.Signatures == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i, s := range e.Signatures {
		if !plain(s.KeyID) {
			return nil, false
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"keyid":`...)
		b = appendJCSString(b, s.KeyID)
		b = append(b, `,"sig":"`...)
		b = base64.StdEncoding.AppendEncode(b, s.Sig)
		b = append(b, `"}`...)
	}
	return append(b, "]}"...), true
}

// plainJSONString reports whether encoding/json writes s as appendJCSString does:
// valid UTF-8 without control characters and without the characters encoding/json
// escapes for HTML (<, >, &) or for JavaScript (U+2028, U+2029).
func plainJSONString(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029 || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// appendJCSString appends s, valid UTF-8, as an RFC 8785 string (section 3.2.2.2):
// quote and backslash escaped, control characters as \b \t \n \f \r or \u00xx,
// everything else as itself.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// DecodePayload unmarshals the payload into v after checking the payload type.
func (e *Envelope) DecodePayload(payloadType string, v any) error {
	if e.PayloadType != payloadType {
		return fmt.Errorf("%w: %q, want %q", ErrPayloadType, e.PayloadType, payloadType)
	}
	return unmarshalStrict(e.Payload, v)
}

// ParseEnvelope parses a DSSE envelope, rejecting unknown fields, an empty payload
// type and a missing signature list.
func ParseEnvelope(data []byte) (*Envelope, error) {
	if len(data) > MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope is %d bytes; the limit is %d", len(data), MaxEnvelopeSize)
	}
	var e Envelope
	if err := unmarshalStrict(data, &e); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	if err := exactForm(data, &e); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return &e, nil
}

func (e *Envelope) check() error {
	if e.PayloadType == "" {
		return errors.New("envelope: payloadType is empty")
	}
	if e.Signatures == nil {
		return errors.New("envelope: signatures is missing")
	}
	for i, s := range e.Signatures {
		if s.KeyID == "" {
			return fmt.Errorf("envelope: signature %d has no keyid", i)
		}
		if len(s.Sig) == 0 {
			return fmt.Errorf("envelope: signature %d is empty", i)
		}
	}
	return nil
}

// unmarshalStrict decodes exactly one JSON value into v, rejecting unknown fields and
// trailing data, so an edited field name is an error rather than a silent zero value.
func unmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// exactForm requires data to mean exactly what v (decoded from it) re-encodes to:
// encoding/json matches field names without regard to case and keeps the last of
// duplicate keys, so without this check two different byte strings could parse to
// one bundle. Both sides are compared in canonical form.
func exactForm(data []byte, v any) error {
	in, err := CanonicalizeJSON(data)
	if err != nil {
		return err
	}
	out, err := Canonical(v)
	if err != nil {
		return err
	}
	if !bytes.Equal(in, out) {
		return errors.New("fields not written exactly as specified (case, duplicates, nulls or missing fields)")
	}
	return nil
}
