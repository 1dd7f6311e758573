package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

func TestHTTPLogAgainstLogServer(t *testing.T) {
	lg := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "acme", File: "acme.log", Token: "tok"}}})
	for _, hashOnly := range []bool{false, true} {
		l, err := client.NewHTTPLog(client.HTTPLogConfig{URL: lg.URL + "/t/acme/append", Token: "tok", HashOnly: hashOnly})
		if err != nil {
			t.Fatal(err)
		}
		leaf := []byte(`{"payloadType":"x","note":"<&> \"quoted\""}`)
		if hashOnly {
			leaf = []byte("hash only")
		}
		p, err := l.Append(context.Background(), leaf)
		if err != nil {
			t.Fatal(err)
		}
		th, _ := receipt.DecodeTreeHead(p.TreeHead)
		root, _ := merkle.ParseHash(th.RootHash)
		hs, _ := receipt.ParseHashes(p.Inclusion.Hashes)
		if err := merkle.VerifyInclusion(p.Inclusion.LeafIndex, p.Inclusion.TreeSize, merkle.LeafHash(leaf), hs, root); err != nil {
			t.Fatalf("hashOnly=%v: %v", hashOnly, err)
		}
	}
	bad, _ := client.NewHTTPLog(client.HTTPLogConfig{URL: lg.URL + "/t/acme/append", Token: "wrong"})
	if _, err := bad.Append(context.Background(), []byte("x")); !errors.Is(err, receipt.ErrLogRefused) {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestHTTPLogRetries(t *testing.T) {
	for _, c := range []struct {
		name     string
		status   int
		sleep    time.Duration
		attempts int64
		sentinel error
	}{
		{"5xx retried three times", 503, 0, 4, receipt.ErrLogUnavailable},
		{"429 retried three times", 429, 0, 4, receipt.ErrLogRefused},
		{"timeout retried three times", 200, 300 * time.Millisecond, 4, receipt.ErrLogUnavailable},
		{"401 not retried", 401, 0, 1, receipt.ErrLogRefused},
		{"413 not retried", 413, 0, 1, receipt.ErrLogRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int64
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if c.sleep > 0 {
					time.Sleep(c.sleep)
				}
				w.WriteHeader(c.status)
				w.Write([]byte(`{"error":"nope"}`))
			}))
			defer ts.Close()
			l, _ := client.NewHTTPLog(client.HTTPLogConfig{URL: ts.URL + "/append", Timeout: 100 * time.Millisecond})
			_, err := l.Append(context.Background(), []byte("x"))
			if !errors.Is(err, c.sentinel) || n.Load() != c.attempts {
				t.Fatalf("err %v after %d attempts; want %v after %d", err, n.Load(), c.sentinel, c.attempts)
			}
		})
	}
}
