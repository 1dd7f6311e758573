package signer

import (
	"encoding/json"
	"fmt"
	"time"
)

// KeyDocument is SPEC.md's key document: `{ log?, keys: [...] }`, the current key
// first and retired keys after it.
type KeyDocument struct {
	Log  string     `json:"log,omitempty"`
	Keys []KeyEntry `json:"keys"`
}

// KeyEntry is one key of a KeyDocument.
type KeyEntry struct {
	KeyID        string `json:"keyid"`
	Alg          string `json:"alg"` // always "ed25519"
	PublicKeyPEM string `json:"publicKeyPem"`
	ValidFrom    string `json:"validFrom"`
	ValidTo      string `json:"validTo,omitempty"`
}

// MaxKeyDocumentSize caps a fetched or read key document.
const MaxKeyDocumentSize = 1 << 20

// Entry makes the KeyEntry for p.
func (p PublicKey) Entry(validFrom time.Time, validTo *time.Time) KeyEntry {
	e := KeyEntry{KeyID: p.KeyID, Alg: "ed25519", PublicKeyPEM: p.PEM(), ValidFrom: FormatTime(validFrom)}
	if validTo != nil {
		e.ValidTo = FormatTime(*validTo)
	}
	return e
}

// ParseKeyDocument parses and checks a key document: every entry is ed25519, its PEM
// parses, and its keyid is the one the PEM hashes to.
func ParseKeyDocument(data []byte) (*KeyDocument, error) {
	if len(data) > MaxKeyDocumentSize {
		return nil, fmt.Errorf("signer: key document is %d bytes; the limit is %d", len(data), MaxKeyDocumentSize)
	}
	var doc KeyDocument
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("signer: key document: %w", err)
	}
	if len(doc.Keys) == 0 {
		return nil, fmt.Errorf("signer: key document lists no keys")
	}
	if _, err := doc.PublicKeys(); err != nil {
		return nil, err
	}
	return &doc, nil
}

// PublicKeys returns the document's keys, checked, in document order.
func (d *KeyDocument) PublicKeys() ([]PublicKey, error) {
	out := make([]PublicKey, 0, len(d.Keys))
	for i, e := range d.Keys {
		if e.Alg != "ed25519" {
			return nil, fmt.Errorf("signer: key document entry %d: alg %q, want ed25519", i, e.Alg)
		}
		p, err := ParsePublicKeyPEM([]byte(e.PublicKeyPEM))
		if err != nil {
			return nil, fmt.Errorf("signer: key document entry %d: %w", i, err)
		}
		if p.KeyID != e.KeyID {
			return nil, fmt.Errorf("signer: key document entry %d: keyid %s does not match its key (%s)", i, e.KeyID, p.KeyID)
		}
		from, err := time.Parse(time.RFC3339Nano, e.ValidFrom)
		if err != nil {
			return nil, fmt.Errorf("signer: key document entry %d: validFrom %q is not an RFC 3339 time", i, e.ValidFrom)
		}
		if e.ValidTo != "" {
			to, err := time.Parse(time.RFC3339Nano, e.ValidTo)
			if err != nil {
				return nil, fmt.Errorf("signer: key document entry %d: validTo %q is not an RFC 3339 time", i, e.ValidTo)
			}
			if !to.After(from) {
				return nil, fmt.Errorf("signer: key document entry %d: validTo %s is not after validFrom %s", i, e.ValidTo, e.ValidFrom)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// TimeLayout is how the service writes timestamps: RFC 3339, UTC, milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t as RFC 3339 UTC with milliseconds, e.g. 2026-11-22T01:02:03.456Z.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }
