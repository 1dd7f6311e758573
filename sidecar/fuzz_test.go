package sidecar_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"svc.dev/svc/policy"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/sidecar"
	"svc.dev/svc/signer"
)

// FuzzHandler drives /record and /decide with arbitrary bodies: the sidecar answers
// 200 or 400 (413 past the cap), never 5xx, and never panics.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		`{"event":{"tool":"refund","args":{"amount":40}},"outcome":{"status":"executed","result":{"ok":1}}}`,
		`{"event":{"tool":"refund","args":{"amount":12.5}},"outcome":{"status":"denied","reason":"policy"},"policy":{"decision":"deny","reasons":[],"errors":["e"],"policyDigest":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}}`,
		`{"tool":"refund","args":{"amount":40}}`,
		`{"event":{"tool":"t","args":{"a":[1,{"b":null}]},"session":{"id":null,"toolUseId":"u"}},"outcome":{"status":"error","error":"x"}}`,
		`{`, `null`, `[]`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	dir := f.TempDir()
	key, err := signer.KeyFromSeed(bytes.Repeat([]byte{12}, 32))
	if err != nil {
		f.Fatal(err)
	}
	log, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), key, "")
	if err != nil {
		f.Fatal(err)
	}
	defer log.Close()
	pol, err := policy.Parse("p.cedar", []byte(policyText))
	if err != nil {
		f.Fatal(err)
	}
	is, err := sdk.New(sdk.Settings{Key: key, AgentID: "a", Framework: "fuzz", Policy: pol, Log: log, ReceiptsDir: filepath.Join(dir, "receipts")})
	if err != nil {
		f.Fatal(err)
	}
	defer is.Close(context.Background())
	h := sidecar.New(is, sidecar.Options{})
	f.Fuzz(func(t *testing.T, body []byte, record bool) {
		path := "/decide"
		if record {
			path = "/record"
		}
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 200, 400, 413:
		default:
			t.Fatalf("%s %q: status %d %s", path, body, w.Code, w.Body.String())
		}
		if w.Code == 200 && record {
			if _, err := receipt.ParseBundle(w.Body.Bytes()); err != nil {
				t.Fatalf("200 with a body that is not a bundle: %v", err)
			}
		}
	})
}
