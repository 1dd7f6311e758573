package signer_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/signer"
)

func seedKey(t *testing.T, n byte) *signer.Key {
	t.Helper()
	k, err := signer.KeyFromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyDocumentRoundTrip(t *testing.T) {
	cur, old := seedKey(t, 1), seedKey(t, 2)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	doc := signer.KeyDocument{Log: "main", Keys: []signer.KeyEntry{
		cur.Public().Entry(to, nil),
		old.Public().Entry(from, &to),
	}}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	// SPEC.md's shape: { log?, keys: [{ keyid, alg: ed25519, publicKeyPem, validFrom, validTo? }] }.
	var raw struct {
		Log  string           `json:"log"`
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Log != "main" || len(raw.Keys) != 2 {
		t.Fatalf("document = %s", data)
	}
	if _, ok := raw.Keys[0]["validTo"]; ok {
		t.Error("current key carries validTo")
	}
	want0 := map[string]any{"keyid": cur.KeyID(), "alg": "ed25519", "publicKeyPem": cur.Public().PEM(), "validFrom": "2026-06-01T00:00:00.000Z"}
	for k, v := range want0 {
		if raw.Keys[0][k] != v {
			t.Errorf("keys[0].%s = %v, want %v", k, raw.Keys[0][k], v)
		}
	}
	if len(raw.Keys[0]) != len(want0) {
		t.Errorf("keys[0] has extra fields: %v", raw.Keys[0])
	}
	if raw.Keys[1]["validTo"] != "2026-06-01T00:00:00.000Z" || raw.Keys[1]["validFrom"] != "2026-01-01T00:00:00.000Z" {
		t.Errorf("keys[1] = %v", raw.Keys[1])
	}

	parsed, err := signer.ParseKeyDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := parsed.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].KeyID != cur.KeyID() || keys[1].KeyID != old.KeyID() ||
		!bytes.Equal(keys[0].Key, cur.Public().Key) || !bytes.Equal(keys[1].Key, old.Public().Key) {
		t.Errorf("PublicKeys = %v", keys)
	}
	// A document without "log" omits the field.
	data, _ = json.Marshal(signer.KeyDocument{Keys: doc.Keys[:1]})
	if strings.Contains(string(data), `"log"`) {
		t.Errorf("empty log written: %s", data)
	}
}

func TestParseKeyDocumentRefusals(t *testing.T) {
	a, b := seedKey(t, 1), seedKey(t, 2)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ea, eb := a.Public().Entry(now, nil), b.Public().Entry(now, nil)
	doc := func(entries ...signer.KeyEntry) []byte {
		data, err := json.Marshal(signer.KeyDocument{Keys: entries})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	swapped := ea
	swapped.KeyID = eb.KeyID
	upper := ea
	upper.KeyID = strings.ToUpper(ea.KeyID)
	wrongAlg := ea
	wrongAlg.Alg = "ecdsa-p256"
	noAlg := ea
	noAlg.Alg = ""
	badPEM := ea
	badPEM.PublicKeyPEM = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
	privPEM := ea
	privPEM.PublicKeyPEM = string(a.PrivatePEM())
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecEntry := ea
	ecEntry.PublicKeyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}))

	cases := map[string][]byte{
		"keyid of another key":        doc(swapped),
		"keyid mismatch in entry 2":   doc(ea, signer.KeyEntry{KeyID: ea.KeyID, Alg: "ed25519", PublicKeyPEM: eb.PublicKeyPEM, ValidFrom: eb.ValidFrom}),
		"keyid in upper case":         doc(upper),
		"wrong alg":                   doc(wrongAlg),
		"missing alg":                 doc(noAlg),
		"bad PEM":                     doc(badPEM),
		"private key PEM":             doc(privPEM),
		"ECDSA key":                   doc(ecEntry),
		"empty keys":                  []byte(`{"keys":[]}`),
		"missing keys":                []byte(`{"log":"x"}`),
		"null keys":                   []byte(`{"keys":null}`),
		"not JSON":                    []byte(`keys`),
		"not an object":               []byte(`[]`),
		"too large":                   append(doc(ea), bytes.Repeat([]byte(" "), signer.MaxKeyDocumentSize)...),
		"keys of the wrong JSON type": []byte(`{"keys":{"keyid":"x"}}`),
	}
	for name, data := range cases {
		if _, err := signer.ParseKeyDocument(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The keyid mismatch error names both ids.
	_, err := signer.ParseKeyDocument(doc(swapped))
	if err == nil || !strings.Contains(err.Error(), eb.KeyID) || !strings.Contains(err.Error(), ea.KeyID) {
		t.Errorf("mismatch error = %v", err)
	}
	if _, err := signer.ParseKeyDocument(doc(ea, eb)); err != nil {
		t.Errorf("valid two-key document: %v", err)
	}
}

// SPEC.md: every entry has validFrom (validTo is the optional one), and both are
// timestamps. A verifier choosing keys by validity needs them to parse.
func TestParseKeyDocumentChecksValidity(t *testing.T) {
	e := seedKey(t, 1).Public().Entry(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nil)
	cases := map[string]func(*signer.KeyEntry){
		"missing validFrom":        func(k *signer.KeyEntry) { k.ValidFrom = "" },
		"validFrom not a time":     func(k *signer.KeyEntry) { k.ValidFrom = "last tuesday" },
		"validTo not a time":       func(k *signer.KeyEntry) { k.ValidTo = "never" },
		"validTo before validFrom": func(k *signer.KeyEntry) { k.ValidTo = "2025-01-01T00:00:00.000Z" },
	}
	for name, mod := range cases {
		entry := e
		mod(&entry)
		data, _ := json.Marshal(signer.KeyDocument{Keys: []signer.KeyEntry{entry}})
		if _, err := signer.ParseKeyDocument(data); err == nil {
			t.Errorf("%s: accepted %s", name, data)
		}
	}
}
