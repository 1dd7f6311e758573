package logserver_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// flakySigner signs with a key unless told to fail, standing in for a signer
// process that stopped answering.
type flakySigner struct {
	receipt.KeySigner
	down atomic.Bool
}

func (f *flakySigner) SignEnvelope(ctx context.Context, pt string, p []byte) (*receipt.Envelope, error) {
	if f.down.Load() {
		return nil, errors.New("signer did not answer")
	}
	return f.KeySigner.SignEnvelope(ctx, pt, p)
}

type testLog struct {
	*logtest.Log
	signer *flakySigner
}

func startTestLog(t *testing.T) *testLog {
	t.Helper()
	key, _ := signer.GenerateKey()
	fs := &flakySigner{KeySigner: receipt.KeySigner{Key: key}}
	l := logtest.Start(t, logtest.Options{Key: key, Signer: fs, AppendTimeout: 2 * time.Second, Tenants: []logtest.Tenant{
		{ID: "default", File: "default.log", Token: "default-token"},
		{ID: "acme", LogID: "acme-prod", File: "acme.log", Token: "acme-token"},
		{ID: "open"},
	}})
	return &testLog{Log: l, signer: fs}
}

func do(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	return testkit.Do(t, method, url, token, body)
}

func TestAppendAndPublicRoutes(t *testing.T) {
	l := startTestLog(t)
	for i, leaf := range []string{`"a receipt"`, `"another"`, `"third"`} {
		code, _, body := do(t, "POST", l.URL+"/append", "default-token", `{"leaf":`+leaf+`}`)
		if code != 200 {
			t.Fatalf("append: %d %s", code, body)
		}
		var p receipt.Proof
		if err := json.Unmarshal([]byte(body), &p); err != nil || p.Inclusion.LeafIndex != uint64(i) {
			t.Fatalf("append %d: %v %+v", i, err, p)
		}
	}
	// A hash-only append.
	h := merkle.LeafHash([]byte("by hash"))
	if code, _, body := do(t, "POST", l.URL+"/append", "default-token", `{"leafHash":"`+h.String()+`"}`); code != 200 {
		t.Fatalf("hash append: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/root?size=2", "", ""); code != 200 || !strings.Contains(body, `"treeSize":2`) {
		t.Fatalf("/root: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/consistency?old=1&new=4", "", ""); code != 200 || !strings.Contains(body, `"newSize":4`) {
		t.Fatalf("/consistency: %d %s", code, body)
	}
	code, _, body := do(t, "GET", l.URL+"/.well-known/svc-log.json", "", "")
	if code != 200 {
		t.Fatal(code, body)
	}
	if _, err := signer.ParseKeyDocument([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if code, _, body := do(t, "GET", l.URL+"/t/acme/.well-known/svc-log.json", "", ""); code != 200 || !strings.Contains(body, `"log":"acme-prod"`) {
		t.Fatalf("tenant key document: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/health", "", ""); code != 200 || !strings.Contains(body, `"ok":true`) || !strings.Contains(body, l.Key.KeyID()) {
		t.Fatalf("/health: %d %s", code, body)
	}
	// Checkpoints: one tick publishes the grown log.
	if err := l.Service.Checkpointer("default").Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, body := do(t, "GET", l.URL+"/checkpoints?since=0", "", ""); code != 200 || !strings.Contains(body, `"treeSize":4`) {
		t.Fatalf("/checkpoints: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/checkpoints?since=4", "", ""); code != 200 || body != "{\"checkpoints\":[]}\n" {
		t.Fatalf("/checkpoints?since=4: %d %q", code, body)
	}
	// Tenant routes with the tenant's token.
	if code, _, body := do(t, "GET", l.URL+"/t/default/leaves?since=1&limit=2", "default-token", ""); code != 200 || !strings.Contains(body, `"size":4`) ||
		!strings.Contains(body, merkle.LeafHash([]byte("another")).String()) {
		t.Fatalf("/leaves: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/t/default/usage", "default-token", ""); code != 200 || !strings.Contains(body, `"totalLeaves":4`) {
		t.Fatalf("/usage: %d %s", code, body)
	}
	code, _, body = do(t, "GET", l.URL+"/t/default/audit", "default-token", "")
	var audit struct {
		Entries []client.AuditEntry `json:"entries"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &audit) != nil || len(audit.Entries) != 2 ||
		audit.Entries[0].Action != "token.add" || audit.Entries[1].Action != "tenant.add" || audit.Entries[0].TenantID != "default" {
		t.Fatalf("/audit: %d %s", code, body)
	}
	tokHash := logserver.HashToken("default-token")
	if strings.Contains(body, "default-token") || !strings.Contains(audit.Entries[0].Detail, hex.EncodeToString(tokHash[:6])) {
		t.Fatalf("the audit entry must name the token by its hash prefix only: %s", body)
	}
}

func TestErrorStatuses(t *testing.T) {
	l := startTestLog(t)
	unauthorized := "{\"error\":\"unauthorized\"}\n"
	for _, c := range []struct {
		name, method, path, token, body string
		status                          int
		want                            string
	}{
		{"append without token", "POST", "/append", "", `{"leaf":"x"}`, 401, unauthorized},
		{"append with a wrong token", "POST", "/append", "nope", `{"leaf":"x"}`, 401, unauthorized},
		{"append with another tenant's token", "POST", "/append", "acme-token", `{"leaf":"x"}`, 401, unauthorized},
		{"tenant append with the default token", "POST", "/t/acme/append", "default-token", `{"leaf":"x"}`, 401, unauthorized},
		{"leaves without token", "GET", "/t/acme/leaves", "", "", 401, unauthorized},
		{"leaves with another tenant's token", "GET", "/t/acme/leaves", "default-token", "", 401, unauthorized},
		{"usage with a wrong token", "GET", "/t/acme/usage", "wrong", "", 401, unauthorized},
		{"audit without token", "GET", "/t/acme/audit", "", "", 401, unauthorized},
		{"tenant routes of a log without tokens", "GET", "/t/open/leaves", "", "", 401, unauthorized},
		{"malformed body", "POST", "/append", "default-token", `{"leaf":`, 400, "body is not"},
		{"both leaf and leafHash", "POST", "/append", "default-token", `{"leaf":"x","leafHash":"` + strings.Repeat("0", 64) + `"}`, 400, "not both"},
		{"unknown field", "POST", "/append", "default-token", `{"leaves":"x"}`, 400, "unknown field"},
		{"bad leafHash", "POST", "/append", "default-token", `{"leafHash":"zz"}`, 400, "leafHash"},
		{"body over 64 KB", "POST", "/append", "default-token", `{"leaf":"` + strings.Repeat("a", 64<<10) + `"}`, 413, "over 65536 bytes"},
		{"root beyond the size", "GET", "/root?size=5", "", "", 400, "outside 0..0"},
		{"root not a number", "GET", "/root?size=-1", "", "", 400, "not a non-negative integer"},
		{"consistency without old", "GET", "/consistency", "", "", 400, "old is required"},
		{"consistency beyond the size", "GET", "/consistency?old=0&new=3", "", "", 400, "new <= 0"},
		{"unknown tenant", "GET", "/t/nobody/head", "", "", 404, "no such tenant"},
		{"unknown route", "GET", "/nope", "", "", 404, "no such route"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := do(t, c.method, l.URL+c.path, c.token, c.body)
			if code != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("got %d %q, want %d containing %q", code, body, c.status, c.want)
			}
		})
	}
}

func TestAppendRateLimitPerToken(t *testing.T) {
	l := startTestLog(t)
	// 300 appends from 16 clients at once with one token: the burst (100) passes, the
	// refill (50/s) adds a little, the rest get 429 with Retry-After: 1.
	type answer struct {
		code int
		hdr  http.Header
		body string
	}
	answers := make(chan answer, 300)
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < 300; i += 16 {
				code, h, b := do(t, "POST", l.URL+"/t/acme/append", "acme-token", fmt.Sprintf(`{"leaf":"rate %d"}`, i))
				answers <- answer{code, h, b}
			}
		}(c)
	}
	wg.Wait()
	close(answers)
	elapsed := time.Since(start)
	ok, limited := 0, 0
	for a := range answers {
		switch a.code {
		case 200:
			ok++
		case 429:
			limited++
			if a.hdr.Get("Retry-After") != "1" || a.body != "{\"error\":\"too many appends; retry shortly\"}\n" {
				t.Fatalf("429 answer: Retry-After %q, body %q", a.hdr.Get("Retry-After"), a.body)
			}
		default:
			t.Fatalf("append: %d %s", a.code, a.body)
		}
	}
	allowed := 100 + int(50*elapsed.Seconds()) + 1
	if ok < 100 || ok > allowed || limited == 0 {
		t.Fatalf("%d allowed and %d limited in %s; want at least the burst of 100 and at most %d", ok, limited, elapsed, allowed)
	}
	// Another tenant's token has its own allowance.
	if code, _, b := do(t, "POST", l.URL+"/append", "default-token", `{"leaf":"other token"}`); code != 200 {
		t.Fatalf("other token: %d %s", code, b)
	}
}

func TestUnavailable(t *testing.T) {
	l := startTestLog(t)
	l.signer.down.Store(true)
	code, _, body := do(t, "GET", l.URL+"/head", "", "")
	if code != 503 || !strings.HasPrefix(body, `{"error":"log unavailable: `) {
		t.Fatalf("/head with the signer down: %d %s", code, body)
	}
	if code, _, body := do(t, "GET", l.URL+"/health", "", ""); code != 503 {
		t.Fatalf("/health with the signer down: %d %s", code, body)
	}
	// The sequencer commits, but cannot sign: the append is answered 503 and a retry
	// once the signer is back gets the leaf's one index.
	code, _, body = do(t, "POST", l.URL+"/append", "default-token", `{"leaf":"during outage"}`)
	if code != 503 || !strings.HasPrefix(body, `{"error":"log unavailable: `) {
		t.Fatalf("append with the signer down: %d %s", code, body)
	}
	l.signer.down.Store(false)
	code, _, body = do(t, "POST", l.URL+"/append", "default-token", `{"leaf":"during outage"}`)
	var p receipt.Proof
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || p.Inclusion.LeafIndex != 0 || p.Inclusion.TreeSize != 1 {
		t.Fatalf("retry after the outage: %d %s", code, body)
	}
	// The store stops answering: the broker is gone.
	l.Service.Conn().Close()
	code, _, body = do(t, "POST", l.URL+"/append", "default-token", `{"leaf":"no broker"}`)
	if code != 503 || !strings.HasPrefix(body, `{"error":"log unavailable: `) {
		t.Fatalf("append without a broker: %d %s", code, body)
	}
}
