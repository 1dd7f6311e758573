package remote_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

func signBody(payloadType string, payload []byte) string {
	b, _ := json.Marshal(map[string]string{"payloadType": payloadType, "payload": base64.StdEncoding.EncodeToString(payload)})
	return string(b)
}

// The round trip: the client signs through the service, and the envelope verifies
// with the key published at /keys, fetched independently of the client.
func TestSignRoundTrip(t *testing.T) {
	s := newSigner(t, 1, testToken, func(c *remote.ServerConfig) { c.LogID = "main" })
	c := newClient(t, s.http.URL, testToken)
	if c.KeyID() != s.key.KeyID() || s.srv.KeyID() != s.key.KeyID() {
		t.Fatalf("client keyid %s, server %s, key %s", c.KeyID(), s.srv.KeyID(), s.key.KeyID())
	}

	payload := treeHead(t, 7, "main")
	env, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, payload)
	if err != nil {
		t.Fatal(err)
	}

	resp, data := get(t, s.http.URL+"/keys")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /keys: %d %s", resp.StatusCode, data)
	}
	doc, err := signer.ParseKeyDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	published, err := doc.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	by, err := env.Verify(published)
	if err != nil {
		t.Fatalf("envelope does not verify with the published key: %v", err)
	}
	if by.KeyID != s.key.KeyID() || !bytes.Equal(by.Key, s.key.Public().Key) {
		t.Errorf("verified by %s, want %s", by.KeyID, s.key.KeyID())
	}
	if _, err := env.Verify([]signer.PublicKey{seedKey(t, 9).Public()}); err == nil {
		t.Error("envelope verifies with an unrelated key")
	}
	if len(env.Signatures) != 1 || env.PayloadType != receipt.PayloadTreeHead || !bytes.Equal(env.Payload, payload) {
		t.Errorf("envelope = %+v", env)
	}
	th, err := receipt.DecodeTreeHead(env)
	if err != nil || th.TreeSize != 7 || th.Log != "main" {
		t.Errorf("tree head = %+v, %v", th, err)
	}
	// The same bytes as the in-process signer: Ed25519 is deterministic.
	local := receipt.Sign(receipt.PayloadTreeHead, payload, s.key)
	if !bytes.Equal(local.Canonical(), env.Canonical()) {
		t.Error("remote envelope differs from an in-process signature")
	}

	// The log's helper works through the client, concurrently (each its own log: one
	// log's heads of different sizes would be refused unless each extends the last).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			head, err := receipt.SignTreeHeadWith(context.Background(), c, uint64(i), strings.Repeat("0f", 32), time.Now(), fmt.Sprintf("log-%d", i))
			if err == nil {
				_, err = head.Verify([]signer.PublicKey{s.key.Public()})
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestSignNeedsTheToken(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	other := newSigner(t, 2, "another-party-token-99999", nil)
	body := signBody(receipt.PayloadTreeHead, treeHead(t, 1, "main"))
	cases := map[string]string{
		"missing":                "",
		"wrong":                  "Bearer wrong-token-0123456789abcdef",
		"another party's token":  "Bearer another-party-token-99999",
		"right token, Basic":     "Basic " + testToken,
		"right token, no scheme": testToken,
		"token with a suffix":    "Bearer " + testToken + "x",
		"token prefix":           "Bearer " + testToken[:len(testToken)-1],
		"empty bearer":           "Bearer ",
		"token hash, not token":  "Bearer " + strings.Repeat("0", 64),
	}
	for name, auth := range cases {
		code, resp := post(t, s.http.URL, auth, "application/json", strings.NewReader(body))
		if code != http.StatusUnauthorized || strings.TrimSpace(resp) != `{"error":"unauthorized"}` {
			t.Errorf("%s: %d %s, want 401 {\"error\":\"unauthorized\"}", name, code, resp)
		}
	}
	// The other party's token works at its own signer, and the right token here.
	if code, resp := post(t, other.http.URL, "Bearer another-party-token-99999", "application/json", strings.NewReader(body)); code != 200 {
		t.Errorf("other signer with its own token: %d %s", code, resp)
	}
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(body)); code != 200 {
		t.Errorf("right token: %d %s", code, resp)
	}
	if code, resp := post(t, s.http.URL, "bearer "+testToken, "application/json", strings.NewReader(body)); code != 200 {
		t.Errorf("scheme is case-insensitive (RFC 7235): %d %s", code, resp)
	}

	// The client reports a refused token, and it is not mistaken for an outage.
	c, err := remote.NewClient(context.Background(), s.http.URL, "another-party-token-99999")
	if err != nil {
		t.Fatal(err) // /keys needs no token
	}
	_, err = c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main"))
	if !errors.Is(err, remote.ErrTokenRefused) || errors.Is(err, receipt.ErrLogUnavailable) ||
		!strings.Contains(err.Error(), "signer refused the token") {
		t.Errorf("wrong token: %v", err)
	}

	// No token, right or wrong, reaches the request log.
	s.http.Close()
	logs := s.logs.String()
	for _, secret := range []string{testToken, "another-party-token", "wrong-token"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log contains %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(logs, `"status":401`) {
		t.Errorf("refusals not logged:\n%s", logs)
	}
}

// The signer signs tree heads and nothing else: each refusal is a 400 that names
// what was wrong, and no envelope comes back.
func TestSignRefusesAnythingButATreeHead(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	good := treeHead(t, 3, "main")
	statement := []byte(`{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://svc.dev/spec/receipt/v0.2"}`)
	th := func(mod func(m map[string]any)) []byte {
		m := map[string]any{"treeSize": 3, "rootHash": strings.Repeat("ab", 32), "timestamp": "2026-04-01T00:00:00.000Z"}
		mod(m)
		b, err := receipt.Canonical(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct{ name, body, want string }{
		{"receipt statement", signBody(receipt.PayloadInToto, statement), "payloadType"},
		{"tree head bytes under the in-toto type", signBody(receipt.PayloadInToto, good), "signs only tree heads"},
		{"delegation grant", signBody(receipt.PayloadDelegation, []byte(`{"version":"0.1"}`)), receipt.PayloadDelegation},
		{"upstream attestation", signBody(receipt.PayloadUpstream, good), "payloadType"},
		{"missing payloadType", `{"payload":"` + base64.StdEncoding.EncodeToString(good) + `"}`, "payloadType is missing"},
		{"missing payload", `{"payloadType":"` + receipt.PayloadTreeHead + `"}`, "payload is missing"},
		{"garbage payload", signBody(receipt.PayloadTreeHead, []byte("\x00\x01garbage")), "not a tree head"},
		{"statement as a tree head", signBody(receipt.PayloadTreeHead, statement), "not a tree head"},
		{"extra field in the head", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["x"] = 1 })), "not a tree head"},
		{"short rootHash", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["rootHash"] = "abcd" })), "rootHash"},
		{"rootHash not hex", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["rootHash"] = strings.Repeat("zz", 32) })), "rootHash"},
		{"rootHash upper case", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["rootHash"] = strings.Repeat("AB", 32) })), "rootHash"},
		{"bad timestamp", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["timestamp"] = "yesterday" })), "timestamp"},
		{"negative size", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["treeSize"] = -1 })), "not a tree head"},
		{"head naming no log", signBody(receipt.PayloadTreeHead, th(func(map[string]any) {})), `without a "log"`},
		{"empty log", signBody(receipt.PayloadTreeHead, th(func(m map[string]any) { m["log"] = "" })), "canonical"},
		{"not canonical", signBody(receipt.PayloadTreeHead, append([]byte(" "), good...)), "canonical"},
		{"keys out of order", signBody(receipt.PayloadTreeHead, []byte(`{"treeSize":3,"rootHash":"`+strings.Repeat("ab", 32)+`","timestamp":"2026-04-01T00:00:00.000Z"}`)), "canonical"},
		{"two heads", signBody(receipt.PayloadTreeHead, append(append([]byte{}, good...), good...)), "not a tree head"},
		{"payload not base64", `{"payloadType":"` + receipt.PayloadTreeHead + `","payload":"%%%"}`, "base64"},
		{"unknown request field", `{"payloadType":"` + receipt.PayloadTreeHead + `","payload":"` + base64.StdEncoding.EncodeToString(good) + `","signatures":[]}`, "signatures"},
		{"trailing data", signBody(receipt.PayloadTreeHead, good) + `{}`, "after the JSON"},
		{"not JSON", `payloadType=x`, "not a sign request"},
		{"empty body", ``, "not a sign request"},
		{"JSON array", `[]`, "not a sign request"},
	}
	for _, tc := range cases {
		code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(tc.body))
		var e struct{ Error string }
		json.Unmarshal([]byte(resp), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) || strings.Contains(resp, "signatures\":[{") {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.name, code, resp, tc.want)
		}
	}
	// The good head is signed, so the cases above fail for their own reason.
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(signBody(receipt.PayloadTreeHead, good))); code != 200 {
		t.Fatalf("good head: %d %s", code, resp)
	}

	// Through the client: a refusal, not an outage, and not an untrusted answer.
	c := newClient(t, s.http.URL, testToken)
	_, err := c.SignEnvelope(context.Background(), receipt.PayloadInToto, statement)
	if !errors.Is(err, remote.ErrRefused) || errors.Is(err, receipt.ErrLogUnavailable) || !strings.Contains(err.Error(), "signs only tree heads") {
		t.Errorf("client signing a statement: %v", err)
	}
}

func TestSignNeedsJSONContent(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	body := signBody(receipt.PayloadTreeHead, treeHead(t, 1, "main"))
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonx"} {
		if code, resp := post(t, s.http.URL, "Bearer "+testToken, ct, strings.NewReader(body)); code != http.StatusUnsupportedMediaType {
			t.Errorf("Content-Type %q: %d %s, want 415", ct, code, resp)
		}
	}
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json; charset=utf-8", strings.NewReader(body)); code != 200 {
		t.Errorf("application/json with charset: %d %s", code, resp)
	}
}

// unsizedReader hides its length, so the client sends the body chunked and the
// server cannot refuse it by Content-Length.
type unsizedReader struct{ r io.Reader }

func (u unsizedReader) Read(p []byte) (int, error) { return u.r.Read(p) }

func TestSignBodyCap(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	good := signBody(receipt.PayloadTreeHead, treeHead(t, 1, "main"))
	// Exactly MaxSignBody: a valid request padded with trailing whitespace is taken.
	atCap := good + strings.Repeat(" ", remote.MaxSignBody-len(good))
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(atCap)); code != 200 {
		t.Fatalf("body of exactly %d bytes: %d %s", remote.MaxSignBody, code, resp)
	}
	over := atCap + " "
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(over)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("body of %d bytes: %d %s, want 413", len(over), code, resp)
	}
	if code, resp := post(t, s.http.URL, "Bearer "+testToken, "application/json", unsizedReader{strings.NewReader(over)}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body of %d bytes: %d %s, want 413", len(over), code, resp)
	}
	// A body over the cap without the token is still a 401: nothing is read first.
	if code, _ := post(t, s.http.URL, "", "application/json", strings.NewReader(over)); code != http.StatusUnauthorized {
		t.Errorf("oversized body without token: %d, want 401", code)
	}
	// The client refuses before sending a payload that cannot fit.
	c := newClient(t, s.http.URL, testToken)
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, bytes.Repeat([]byte("a"), remote.MaxSignBody)); !errors.Is(err, remote.ErrRefused) {
		t.Errorf("client with an oversized payload: %v", err)
	}
}

func TestKeysDocument(t *testing.T) {
	old1, old2 := seedKey(t, 11), seedKey(t, 12)
	from1 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	from2 := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	s := newSigner(t, 1, testToken, func(c *remote.ServerConfig) {
		c.LogID = "main"
		c.Retired = []remote.RetiredKey{
			{Key: old2.Public(), ValidFrom: from2, ValidTo: validFrom},
			{Key: old1.Public(), ValidFrom: from1, ValidTo: from2},
		}
	})
	resp, data := get(t, s.http.URL+"/keys") // no token
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /keys: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	if bytes.Contains(data, []byte("PRIVATE")) {
		t.Fatalf("key document holds private material:\n%s", data)
	}
	priv := string(s.key.PrivatePEM())
	privBody := strings.Join(strings.Split(priv, "\n")[1:3], "")
	if bytes.Contains(data, []byte(privBody[:40])) {
		t.Fatalf("key document holds the private key's encoding:\n%s", data)
	}
	doc, err := signer.ParseKeyDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Log != "main" || len(doc.Keys) != 3 {
		t.Fatalf("document = %+v", doc)
	}
	want := []struct {
		id, from, to string
	}{
		{s.key.KeyID(), "2026-03-01T00:00:00.000Z", ""},
		{old2.KeyID(), "2025-06-01T00:00:00.000Z", "2026-03-01T00:00:00.000Z"},
		{old1.KeyID(), "2025-01-01T00:00:00.000Z", "2025-06-01T00:00:00.000Z"},
	}
	for i, w := range want {
		e := doc.Keys[i]
		if e.KeyID != w.id || e.Alg != "ed25519" || e.ValidFrom != w.from || e.ValidTo != w.to {
			t.Errorf("keys[%d] = %+v, want keyid %s validFrom %s validTo %q", i, e, w.id, w.from, w.to)
		}
	}
	keys, _ := doc.PublicKeys()
	if !bytes.Equal(keys[1].Key, old2.Public().Key) || !bytes.Equal(keys[2].Key, old1.Public().Key) {
		t.Error("retired public keys differ")
	}
	// A head a retired key signed still verifies against the document.
	oldHead := receipt.Sign(receipt.PayloadTreeHead, treeHead(t, 2, ""), old1)
	if by, err := oldHead.Verify(keys); err != nil || by.KeyID != old1.KeyID() {
		t.Errorf("old head: %v %v", by.KeyID, err)
	}

	// The client reads the same document, and learns the current key.
	c := newClient(t, s.http.URL, testToken)
	cd, err := c.Keys(context.Background())
	if err != nil || len(cd.Keys) != 3 || cd.Keys[0].KeyID != s.key.KeyID() || c.KeyID() != s.key.KeyID() {
		t.Errorf("client Keys = %+v, %v", cd, err)
	}

	// Without a log id, no "log" field.
	plain := newSigner(t, 2, testToken, nil)
	_, data = get(t, plain.http.URL+"/keys")
	if bytes.Contains(data, []byte(`"log"`)) {
		t.Errorf("log written without a log id: %s", data)
	}
}

func TestLoadRetiredKey(t *testing.T) {
	dir := t.TempDir()
	old := seedKey(t, 5)
	_, pubPath, err := old.WriteKeyFiles(dir, "old")
	if err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(pubPath, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	rk, err := remote.LoadRetiredKey(pubPath, validFrom)
	if err != nil {
		t.Fatal(err)
	}
	if rk.Key.KeyID != old.KeyID() || !rk.ValidFrom.Equal(mtime) || !rk.ValidTo.Equal(validFrom) {
		t.Errorf("retired key = %s %v %v", rk.Key.KeyID, rk.ValidFrom, rk.ValidTo)
	}
	// A file newer than the current key's validFrom (copied into place, say): validFrom
	// is moved to just before validTo.
	newer := validFrom.Add(24 * time.Hour)
	os.Chtimes(pubPath, newer, newer)
	rk, err = remote.LoadRetiredKey(pubPath, validFrom)
	if err != nil || !rk.ValidFrom.Equal(validFrom.Add(-time.Millisecond)) || !rk.ValidTo.Equal(validFrom) {
		t.Errorf("newer file: %v %v %v", rk.ValidFrom, rk.ValidTo, err)
	}
	if _, err := remote.NewServer(remote.ServerConfig{Key: seedKey(t, 1), Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{rk}, Heads: openHeads(t, t.TempDir())}); err != nil {
		t.Errorf("server refuses the clamped entry: %v", err)
	}
	// A private key file is not a retired public key.
	if _, err := remote.LoadRetiredKey(filepath.Join(dir, "old.key"), validFrom); err == nil {
		t.Error("a .key file was taken as a retired key")
	}
}

func TestNewServerRefusesBadConfig(t *testing.T) {
	k, old := seedKey(t, 1), seedKey(t, 2)
	retired := remote.RetiredKey{Key: old.Public(), ValidFrom: validFrom.Add(-time.Hour), ValidTo: validFrom}
	badID := retired
	badID.Key.KeyID = strings.Repeat("0", 64)
	cases := map[string]remote.ServerConfig{
		"no key":                   {Token: testToken, ValidFrom: validFrom},
		"no token":                 {Key: k, ValidFrom: validFrom},
		"short token":              {Key: k, Token: "short", ValidFrom: validFrom},
		"token with a space":       {Key: k, Token: "token with a space in it", ValidFrom: validFrom},
		"token with a newline":     {Key: k, Token: testToken + "\n", ValidFrom: validFrom},
		"no validFrom":             {Key: k, Token: testToken},
		"retired is current":       {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{{Key: k.Public(), ValidFrom: retired.ValidFrom, ValidTo: validFrom}}},
		"retired twice":            {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{retired, retired}},
		"retired without dates":    {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{{Key: old.Public()}}},
		"retired validTo < from":   {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{{Key: old.Public(), ValidFrom: validFrom, ValidTo: validFrom.Add(-time.Hour)}}},
		"retired validTo = from":   {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{{Key: old.Public(), ValidFrom: validFrom, ValidTo: validFrom.Add(time.Microsecond)}}},
		"retired keyid mismatch":   {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{badID}},
		"empty retired key":        {Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{{}}},
		"log id with control char": {Key: k, Token: testToken, ValidFrom: validFrom, LogID: "a\nb"},
		"no head store":            {Key: k, Token: testToken, ValidFrom: validFrom},
	}
	for name, cfg := range cases {
		if name != "no head store" {
			cfg.Heads = openHeads(t, t.TempDir())
		}
		if _, err := remote.NewServer(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: error reveals the token: %v", name, err)
		}
	}
	if _, err := remote.NewServer(remote.ServerConfig{Key: k, Token: testToken, ValidFrom: validFrom, Retired: []remote.RetiredKey{retired}, Heads: openHeads(t, t.TempDir())}); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestHealthAndRouting(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	resp, data := get(t, s.http.URL+"/health")
	var h map[string]any
	if err := json.Unmarshal(data, &h); err != nil || resp.StatusCode != 200 || h["ok"] != true || h["keyid"] != s.key.KeyID() || len(h) != 2 {
		t.Errorf("GET /health: %d %s", resp.StatusCode, data)
	}
	if err := newClient(t, s.http.URL, testToken).Health(context.Background()); err != nil {
		t.Errorf("client Health: %v", err)
	}
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/sign", 405, "POST"},
		{"PUT", "/sign", 405, "POST"},
		{"POST", "/keys", 405, "GET, HEAD"},
		{"DELETE", "/health", 405, "GET, HEAD"},
		{"GET", "/", 404, ""},
		{"GET", "/sign/", 404, ""},
		{"GET", "/.well-known/svc-log.json", 404, ""},
		{"POST", "/admin", 404, ""},
	} {
		req, _ := http.NewRequest(tc.method, s.http.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error string }
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q and a JSON error", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, tc.code, tc.allow)
		}
	}
}

// One structured line per request: method, path, status, duration, never the token.
func TestRequestLog(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	c := newClient(t, s.http.URL, testToken)
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 42, "main")); err != nil {
		t.Fatal(err)
	}
	post(t, s.http.URL, "Bearer "+testToken, "application/json", strings.NewReader(signBody(receipt.PayloadInToto, []byte("{}"))))
	s.http.Close() // waits for the handlers, so every line is written
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == "signer request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("got %d log lines, want 3 (keys, sign, refused sign):\n%s", len(lines), s.logs.String())
	}
	want := []struct {
		path   string
		status float64
	}{{"/keys", 200}, {"/sign", 200}, {"/sign", 400}}
	for i, w := range want {
		m := lines[i]
		if m["path"] != w.path || m["status"] != w.status || m["method"] == nil || m["duration"] == nil {
			t.Errorf("line %d = %v, want path %s status %v with method and duration", i, m, w.path, w.status)
		}
	}
	if lines[1]["treeSize"] != float64(42) {
		t.Errorf("signed request does not log the tree size: %v", lines[1])
	}
	if lines[2]["error"] == nil || lines[2]["level"] != "WARN" {
		t.Errorf("refused request does not log why: %v", lines[2])
	}
	if strings.Contains(s.logs.String(), testToken) {
		t.Error("the token is logged")
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	srv, err := remote.NewServer(remote.ServerConfig{Key: seedKey(t, 1), Token: testToken, ValidFrom: validFrom, Logger: discardLogger(), Heads: openHeads(t, t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	c := newClient(t, "http://"+ln.Addr().String(), testToken)
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	// Afterwards the signer is unreachable: an outage, for the client.
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("after shutdown: %v", err)
	}
}
