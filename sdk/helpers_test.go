package sdk_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// writeKey writes <dir>/keys/agent.key and .pub for a deterministic key.
func writeKey(t testing.TB, dir string, seed byte) (*signer.Key, string) {
	t.Helper()
	k, err := signer.KeyFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	kp, _, err := k.WriteKeyFiles(filepath.Join(dir, "keys"), "agent")
	if err != nil {
		t.Fatal(err)
	}
	return k, kp
}

func writeFile(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeConfig writes v as <dir>/sdk.json.
func writeConfig(t testing.TB, dir string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, filepath.Join(dir, "sdk.json"), string(data))
}

// rawPredicate is the predicate as signed JSON, to check null and {} literally.
func rawPredicate(t testing.TB, b *receipt.Bundle) map[string]json.RawMessage {
	t.Helper()
	st, err := receipt.DecodeStatement(b.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(st.Predicate, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func strp(s string) *string { return &s }
