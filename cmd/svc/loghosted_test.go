package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
)

func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	code, _, b := testkit.Do(t, method, url, token, body)
	return code, b
}

// TestHostedLogEndToEnd runs svc log --db-env against a real PostgreSQL, a broker and
// svc signer's server, and administers it with svc log-admin and the admin API.
func TestHostedLogEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ns := testkit.ListeningBroker(t)
	_, ss := startTestSigner(t)
	t.Setenv("TEST_DATABASE_URL", pgtest.New(t))
	t.Setenv("TEST_ADMIN_TOKEN", "admin-token-456-0123456789abcdefghij")
	t.Setenv("TEST_METRICS_TOKEN", "metrics-token-789")
	base, _ := startLogCmd(t, "--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "--data", filepath.Join(dir, "data"),
		"--signer-url", ss.URL, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN", "--public-url", "https://log.example",
		"--metrics-token-env", "TEST_METRICS_TOKEN")
	admin := func(args ...string) string {
		return mustRun(t, append([]string{"log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests")}, args...)...)
	}
	admin("tenant", "add", "acme", "--log-id", "log.example/acme")
	token := strings.TrimSpace(admin("token", "add", "acme", "--label", "ci"))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("token add printed %q", token)
	}
	if s, body := httpDo(t, "POST", base+"/t/acme/append", token, `{"leaf":"hello"}`); s != 200 {
		t.Fatalf("append with the new token: %d %s", s, body)
	}
	if s, _ := httpDo(t, "POST", base+"/t/acme/append", "", `{"leaf":"x"}`); s != 401 {
		t.Fatalf("append without a token: %d", s)
	}
	if s, body := httpDo(t, "GET", base+"/t/acme/usage", token, ""); s != 200 || !strings.Contains(body, `"appends":1`) || !strings.Contains(body, `"plan":"free"`) || !strings.Contains(body, `"quota":10000`) {
		t.Fatalf("usage: %d %s", s, body)
	}
	// The admin API of the same process sees the tenant the command line added.
	if s, body := httpDo(t, "GET", base+"/admin/tenants", "admin-token-456-0123456789abcdefghij", ""); s != 200 || !strings.Contains(body, `"id":"acme"`) || !strings.Contains(body, `"id":"default"`) {
		t.Fatalf("admin tenants: %d %s", s, body)
	}
	if s, _ := httpDo(t, "GET", base+"/admin/tenants", "wrong", ""); s != 401 {
		t.Fatalf("admin with a wrong token: %d", s)
	}
	// /metrics of the hosted process: routes by pattern (never the tenant's path), the
	// database projection among the consumers, acme's sequencer backlog.
	testkit.Eventually(t, 10*time.Second, func() error {
		s, body := httpDo(t, "GET", base+"/metrics", "metrics-token-789", "")
		for _, want := range []string{
			`svc_http_requests_total{route="POST /t/{tenant}/append",status="200"} 1`,
			`svc_http_requests_total{route="POST /t/{tenant}/append",status="401"} 1`,
			`svc_append_refusals_total{reason="unauthorized"} 1`,
			`svc_projection_position{consumer="store.leaves"}`,
			`svc_sequencer_pending{tenant="acme"} 0`,
		} {
			if s != 200 || !strings.Contains(body, want) {
				return fmt.Errorf("GET /metrics: %d, no %s in\n%s", s, want, body)
			}
		}
		return nil
	})
	// With --public-url, token add prints a curl line that appends as pasted.
	code, _, errOut := runSvc(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "--public-url", base, "token", "add", "acme", "--label", "pasted")
	curl, _, ok := strings.Cut(errOut[max(strings.Index(errOut, "curl "), 0):], " ; ")
	if code != 0 || !ok || !strings.HasPrefix(curl, "curl ") || strings.Contains(curl, "<") {
		t.Fatalf("token add --public-url: exit %d, %s", code, errOut)
	}
	if out, err := exec.Command("sh", "-c", curl+" -s").CombinedOutput(); err != nil || !strings.Contains(string(out), `"inclusion"`) {
		t.Fatalf("log-admin's curl line as printed: %v\n%s\n%s", err, curl, out)
	}
	out := admin("tenant", "list")
	if !regexp.MustCompile(`acme\s+log.example/acme\s+free\s+enabled`).MatchString(out) {
		t.Fatalf("tenant list:\n%s", out)
	}
	var prefix string
	{
		out := admin("token", "list", "acme")
		m := regexp.MustCompile(`acme\s+([0-9a-f]{12})\s+ci`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("token list:\n%s", out)
		}
		prefix = m[1]
		if strings.Contains(out, token) {
			t.Fatal("token list shows the token")
		}
	}
	// Import a log file into the default tenant.
	var file strings.Builder
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	for i := range 500 {
		leaf := fmt.Sprintf("imported %d", i)
		h := merkle.LeafHash([]byte(leaf))
		tree.Append(h)
		if i%5 == 0 {
			fmt.Fprintf(&file, "{\"pruned\":\"%s\"}\n", h)
		} else {
			q, _ := json.Marshal(leaf)
			file.Write(q)
			file.WriteByte('\n')
		}
	}
	root, _ := tree.RootAt(500)
	path := filepath.Join(dir, "old.jsonl")
	os.WriteFile(path, []byte(file.String()), 0o644)
	out = admin("import", "--file", path)
	if !strings.Contains(out, "imported 500 leaves") || !strings.Contains(out, root.String()) {
		t.Fatalf("import:\n%s", out)
	}
	if s, body := httpDo(t, "GET", base+"/root?size=500", "", ""); s != 200 || !strings.Contains(body, root.String()) {
		t.Fatalf("root of the default tenant after import: %d %s", s, body)
	}
	// A tenant export from the hosted log adds up (head, leaves, usage, audit).
	t.Setenv("TEST_ACME_TOKEN", token)
	exportDir := filepath.Join(dir, "export")
	out = mustRun(t, "log-export", "--log-url", base, "--tenant", "acme", "--token-env", "TEST_ACME_TOKEN", "--out", exportDir)
	if usage, err := os.ReadFile(filepath.Join(exportDir, "usage.json")); err != nil || !strings.Contains(string(usage), `"plan":"free"`) {
		t.Fatalf("export usage.json: %s %v (output %s)", usage, err, out)
	}
	admin("token", "revoke", "acme", prefix)
	// Another process (this command line) revoked it: refused within a second.
	testkit.Eventually(t, time.Second, func() error {
		if s, _ := httpDo(t, "POST", base+"/t/acme/append", token, fmt.Sprintf(`{"leaf":"after revoke %d"}`, time.Now().UnixNano())); s != 401 {
			return fmt.Errorf("append with a revoked token: %d", s)
		}
		return nil
	})
	token2 := strings.TrimSpace(admin("token", "add", "acme", "--label", "second"))
	admin("tenant", "disable", "acme")
	testkit.Eventually(t, time.Second, func() error {
		if s, body := httpDo(t, "POST", base+"/t/acme/append", token2, fmt.Sprintf(`{"leaf":"disabled %d"}`, time.Now().UnixNano())); s != 403 {
			return fmt.Errorf("append to a disabled tenant: %d %s", s, body)
		}
		return nil
	})
	admin("tenant", "plan", "acme", "team")
	if out = admin("tenant", "public", "acme", "on"); !strings.Contains(out, "acme's log is public") {
		t.Fatalf("tenant public: %s", out)
	}
	out = admin("audit", "--tenant", "acme")
	for _, want := range []string{"tenant.add", "token.add", "token.revoke", "tenant.disable", "plan.set", "log.public", commandLineActor()} {
		if !strings.Contains(out, want) {
			t.Fatalf("audit lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, token) || strings.Contains(out, token2) {
		t.Fatal("the audit trail shows a token")
	}
	// svc replay db rebuilds the same rows into an empty database.
	t.Setenv("TEST_NEW_DATABASE_URL", pgtest.New(t))
	out = mustRun(t, "replay", "db", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "--db-env", "TEST_NEW_DATABASE_URL")
	if !strings.Contains(out, "rebuilt the database") {
		t.Fatalf("replay db: %s", out)
	}
	rows := func(env, q string) string {
		conn, err := pgx.Connect(context.Background(), os.Getenv(env))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var s string
		if err := conn.QueryRow(context.Background(), q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, q := range []string{
		"SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY id), '') FROM tenants t",
		"SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY hash), '') FROM tokens t",
		"SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY stream_seq), '') FROM audit t",
		"SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY tenant_id, month), '') FROM usage t",
	} {
		testkit.Eventually(t, 5*time.Second, func() error {
			if live, rebuilt := rows("TEST_DATABASE_URL", q), rows("TEST_NEW_DATABASE_URL", q); live != rebuilt || live == "" {
				return fmt.Errorf("%s:\nlive:\n%s\nrebuilt:\n%s", q, live, rebuilt)
			}
			return nil
		})
	}
	if code, _, errOut := runSvc(t, "replay", "db", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "--db-env", "TEST_NEW_DATABASE_URL"); code == 0 || !strings.Contains(errOut, "empty database") {
		t.Fatalf("replay into a filled database: exit %d %s", code, errOut)
	}
	if code, _, errOut := runSvc(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "tenant", "add", "acme"); code == 0 || !strings.Contains(errOut, "tenant exists") {
		t.Fatalf("adding acme twice: exit %d: %s", code, errOut)
	}
}
