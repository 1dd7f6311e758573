package remote_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

const testToken = "test-token-0123456789abcdef"

var validFrom = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func seedKey(t testing.TB, n byte) *signer.Key {
	t.Helper()
	k, err := signer.KeyFromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type testSigner struct {
	key  *signer.Key
	srv  *remote.Server
	http *httptest.Server // listens on 127.0.0.1, port chosen by the kernel
	logs *testkit.LockedBuffer
}

// newSigner starts a signer service with key seed n on a real loopback HTTP server.
func newSigner(t *testing.T, n byte, token string, mod func(*remote.ServerConfig)) *testSigner {
	t.Helper()
	logs := &testkit.LockedBuffer{}
	cfg := remote.ServerConfig{
		Key:       seedKey(t, n),
		Token:     token,
		ValidFrom: validFrom,
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
		Heads:     openHeads(t, t.TempDir()),
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := remote.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &testSigner{key: cfg.Key, srv: srv, http: hs, logs: logs}
}

// treeHead is the canonical payload of a tree head, as a log produces it.
func treeHead(t testing.TB, size uint64, logID string) []byte {
	t.Helper()
	p, err := receipt.Canonical(receipt.TreeHead{
		TreeSize: size, RootHash: strings.Repeat("ab", 32), Timestamp: "2026-04-01T00:00:00.000Z", Log: logID,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// post sends POST /sign with an optional Authorization header value.
func post(t *testing.T, url, authorization, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/sign", body)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, data := testkit.Send(t, req)
	return resp.StatusCode, data
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func newClient(t *testing.T, url, token string, opts ...remote.Option) *remote.Client {
	t.Helper()
	c, err := remote.NewClient(context.Background(), url, token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openHeads opens a head store in dir.
func openHeads(t testing.TB, dir string) *remote.HeadStore {
	t.Helper()
	h, err := remote.OpenHeadStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
