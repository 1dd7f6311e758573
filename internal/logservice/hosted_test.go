package logservice

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// frontEnd starts one database-backed log server process on the broker at natsURL
// and the database at dbURL.
func frontEnd(t *testing.T, natsURL, dbURL string, key *signer.Key) (*Service, string) {
	t.Helper()
	return frontEndIn(t, t.TempDir(), natsURL, dbURL, key)
}

func frontEndIn(t *testing.T, dir, natsURL, dbURL string, key *signer.Key) (*Service, string) {
	t.Helper()
	return frontEndLogged(t, dir, natsURL, dbURL, key, slog.New(slog.DiscardHandler))
}

// frontEndLogged is frontEndIn with the process's log lines going to logger.
func frontEndLogged(t *testing.T, dir, natsURL, dbURL string, key *signer.Key, logger *slog.Logger) (*Service, string) {
	t.Helper()
	return frontEndWith(t, dir, natsURL, dbURL, key, logger, Hosted{LeaseTTL: 2 * time.Second}, 1)
}

// frontEndWith is frontEndLogged with the hosted settings h (its Store is filled in)
// and the streams' replica count.
func frontEndWith(t *testing.T, dir, natsURL, dbURL string, key *signer.Key, logger *slog.Logger, h Hosted, replicas int, opts ...func(*Config)) (*Service, string) {
	t.Helper()
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	h.Store = st
	cfg := Config{
		DataDir: dir, NATSURL: natsURL, Replicas: replicas, Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour,
		Logger: logger, Hosted: &h,
	}
	return startServed(t, cfg, opts...)
}

// startServed applies opts to cfg, starts the service and serves its handler; the
// cleanup closes the server, the service and cfg.Hosted.Store.
func startServed(t *testing.T, cfg Config, opts ...func(*Config)) (*Service, string) {
	t.Helper()
	st := cfg.Hosted.Store
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { hs.Close(); svc.Close(); st.Close() })
	return svc, hs.URL
}

// hostedParts starts what a database-backed process needs: a broker listening on a
// loopback port (processes connect by URL), a fresh database and a log key.
func hostedParts(t *testing.T) (*server.Server, string, *signer.Key) {
	t.Helper()
	srv := testkit.ListeningBroker(t)
	key, _ := signer.GenerateKey()
	return srv, pgtest.New(t), key
}

// addTenant creates tenant through a's admin, with one token, which it returns.
func addTenant(t *testing.T, a *Service, tenant string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := a.Admin().AddTenant(ctx, "test", tenant, ""); err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Admin().AddToken(ctx, "test", tenant, "ci")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func appendTo(t *testing.T, base, tenant, token, leaf string) (int, []byte) {
	t.Helper()
	code, _, body := testkit.Do(t, http.MethodPost, client.TenantBase(base, tenant)+"/append", token, fmt.Sprintf(`{"leaf":%q}`, leaf))
	return code, []byte(body)
}

// TestTwoFrontEnds: two database-backed processes on one broker and one database
// serve the same tenants: a tenant created through one appends through both, each
// answer a proof from the tenant's one sequencer that verifies against its head;
// another tenant's token and a revoked token get 401 on the other process within a
// second; a disabled tenant's appends get 403; the second process takes a tenant
// over when the first stops.
func TestTwoFrontEnds(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, urlA := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	b, urlB := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	ctx := context.Background()
	for _, id := range []string{"acme", "globex"} {
		if _, err := a.Admin().AddTenant(ctx, "test", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	tokA, _, err := a.Admin().AddToken(ctx, "test", "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	tokG, _, err := b.Admin().AddToken(ctx, "test", "globex", "ci")
	if err != nil {
		t.Fatal(err)
	}
	// As soon as the creation is answered, the creating process appends.
	if s, body := appendTo(t, urlA, "acme", tokA, "first"); s != 200 {
		t.Fatalf("append through the creating process: %d %s", s, body)
	}
	holders := 0
	for _, svc := range []*Service{a, b} {
		if svc.Sequencer("acme") != nil {
			holders++
		}
	}
	if holders != 1 {
		t.Fatalf("%d processes run acme's sequencer, want 1", holders)
	}
	testkit.Eventually(t, 2*time.Second, func() error {
		if s, body := appendTo(t, urlB, "acme", tokA, "probe"); s != 200 {
			return fmt.Errorf("append through the other process: %d %s", s, body)
		}
		return nil
	})
	indices := map[uint64]bool{}
	for i := range 20 {
		base := urlA
		if i%2 == 1 {
			base = urlB
		}
		s, body := appendTo(t, base, "acme", tokA, fmt.Sprintf("leaf %d", i))
		if s != 200 {
			t.Fatalf("append %d: %d %s", i, s, body)
		}
		var p receipt.Proof
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		if indices[p.Inclusion.LeafIndex] {
			t.Fatalf("index %d assigned twice", p.Inclusion.LeafIndex)
		}
		indices[p.Inclusion.LeafIndex] = true
		if _, err := p.TreeHead.Verify([]signer.PublicKey{key.Public()}); err != nil {
			t.Fatalf("head signature: %v", err)
		}
		head, err := receipt.DecodeTreeHead(p.TreeHead)
		if err != nil {
			t.Fatal(err)
		}
		root, _ := merkle.ParseHash(head.RootHash)
		hashes, err := receipt.ParseHashes(p.Inclusion.Hashes)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkle.VerifyInclusion(p.Inclusion.LeafIndex, p.Inclusion.TreeSize, merkle.LeafHash([]byte(fmt.Sprintf("leaf %d", i))), hashes, root); err != nil {
			t.Fatalf("append %d through %s: proof does not verify: %v", i, base, err)
		}
	}
	// Both fronts serve the same head (the read-only tree follows the log of record).
	testkit.Eventually(t, 2*time.Second, func() error {
		var sizes []uint64
		for _, u := range []string{urlA, urlB} {
			resp, err := http.Get(u + "/t/acme/root")
			if err != nil {
				return err
			}
			var r struct{ TreeSize uint64 }
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			sizes = append(sizes, r.TreeSize)
		}
		if sizes[0] != 22 || sizes[1] != 22 {
			return fmt.Errorf("sizes %v, want 22 on both", sizes)
		}
		return nil
	})
	// Both fronts serve the same entry bundle, the holder's from its sequencer's tree
	// and the other's from its read-only tree, both read from the log of record.
	var bundles []string
	for _, u := range []string{urlA, urlB} {
		code, _, body := testkit.Do(t, http.MethodGet, u+"/t/acme/tile/entries/000.p/22", tokA, "")
		if code != 200 {
			t.Fatalf("entry bundle through %s: %d %s", u, code, body)
		}
		bundles = append(bundles, body)
	}
	if bundles[0] != bundles[1] || !strings.HasPrefix(bundles[0], "\x00\x05first\x00\x05probe\x00\x06leaf 0") {
		t.Fatalf("the fronts serve different or wrong bundles: %q, %q", bundles[0], bundles[1])
	}
	// A checkpoint published by the holder is listed by both fronts, from PostgreSQL.
	holderSvc := a
	if b.Sequencer("acme") != nil {
		holderSvc = b
	}
	if err := holderSvc.Checkpointer("acme").Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{urlA, urlB} {
		resp, err := http.Get(u + "/t/acme/checkpoints?since=0")
		if err != nil {
			t.Fatal(err)
		}
		var cps struct {
			Checkpoints []struct {
				TreeSize uint64
				RootHash string
				SignedAt string
				TreeHead *receipt.Envelope
			}
		}
		json.NewDecoder(resp.Body).Decode(&cps)
		resp.Body.Close()
		// The newest is the one Tick signed at 22; an earlier one may be there too (a
		// holder that stopped during the hand-over above signs what it had), and every
		// one verifies, in increasing sizes.
		n := len(cps.Checkpoints)
		if n == 0 || cps.Checkpoints[n-1].TreeSize != 22 {
			t.Fatalf("checkpoints at %s: %+v", u, cps)
		}
		for i, cp := range cps.Checkpoints {
			if cp.TreeHead == nil || cp.SignedAt == "" || (i > 0 && cp.TreeSize <= cps.Checkpoints[i-1].TreeSize) {
				t.Fatalf("checkpoints at %s: %+v", u, cps)
			}
			if _, err := cp.TreeHead.Verify([]signer.PublicKey{key.Public()}); err != nil {
				t.Fatalf("checkpoint head at %s: %v", u, err)
			}
		}
	}
	// Another tenant's token: 401 on both, on every append route; the hash tiles
	// are public (no token, or anyone's, reads them).
	for _, u := range []string{urlA, urlB} {
		for _, tok := range []string{"", tokG} {
			req, _ := http.NewRequest("POST", u+"/t/acme/add", strings.NewReader("tessera-style leaf"))
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Fatalf("POST /t/acme/add at %s with token %q: %d, want 401", u, tok, resp.StatusCode)
			}
			req, _ = http.NewRequest("GET", u+"/t/acme/tile/0/000.p/22", nil)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			if resp, err = http.DefaultClient.Do(req); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET a hash tile of acme at %s with token %q: %d, want 200", u, tok, resp.StatusCode)
			}
		}
		if s, _ := appendTo(t, u, "acme", tokG, "x"); s != 401 {
			t.Fatalf("globex's token on acme at %s: %d, want 401", u, s)
		}
		if s, _ := appendTo(t, u, "acme", "", "x"); s != 401 {
			t.Fatalf("no token at %s: %d, want 401", u, s)
		}
	}
	// The tenant routes: own token 200, another tenant's or none 401, on both fronts.
	get := func(url, token string) (int, string) {
		code, _, body := testkit.Do(t, "GET", url, token, "")
		return code, body
	}
	for _, u := range []string{urlA, urlB} {
		for _, route := range []string{"/t/acme/usage", "/t/acme/audit", "/t/acme/leaves?since=0&limit=5"} {
			if s, body := get(u+route, tokA); s != 200 {
				t.Fatalf("%s%s with acme's token: %d %s", u, route, s, body)
			}
			for _, bad := range []string{tokG, "", strings.Repeat("0", 64)} {
				if s, _ := get(u+route, bad); s != 401 {
					t.Fatalf("%s%s with token %q: %d, want 401", u, route, bad, s)
				}
			}
		}
		s, body := get(u+"/t/acme/usage", tokA)
		if s != 200 || !strings.Contains(body, `"plan":"free"`) || !strings.Contains(body, `"quota":10000`) || !strings.Contains(body, `"liveTokens":1`) || !strings.Contains(body, `"totalLeaves":22`) {
			t.Fatalf("usage at %s: %s", u, body)
		}
	}
	// Revoked through A: refused by B within a second.
	tn, _ := a.View().Tenant("acme")
	if _, err := a.Admin().RevokeToken(ctx, "test", "acme", tn.Tokens[0].TokenHash); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	testkit.Eventually(t, time.Second, func() error {
		if s, _ := appendTo(t, urlB, "acme", tokA, fmt.Sprintf("after revoke %d", time.Now().UnixNano())); s != 401 {
			return fmt.Errorf("revoked token on the other process: %d", s)
		}
		return nil
	})
	if d := time.Since(revoked); d > time.Second {
		t.Fatalf("revocation took %s", d)
	}
	// Disabled: 403 on both.
	if _, err := b.Admin().DisableTenant(ctx, "test", "globex"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{urlA, urlB} {
		testkit.Eventually(t, 2*time.Second, func() error {
			if s, body := appendTo(t, u, "globex", tokG, fmt.Sprintf("disabled %s %d", u, time.Now().UnixNano())); s != 403 {
				return fmt.Errorf("disabled tenant at %s: %d %s, want 403", u, s, body)
			}
			return nil
		})
	}
	// The holder of acme's sequencer stops; the other process takes it over.
	holder, other, otherURL := a, b, urlB
	if b.Sequencer("acme") != nil {
		holder, other, otherURL = b, a, urlA
	}
	holder.Close()
	tok2, _, err := other.Admin().AddToken(ctx, "test", "acme", "after")
	if err != nil {
		t.Fatal(err)
	}
	var after receipt.Proof
	testkit.Eventually(t, 10*time.Second, func() error {
		s, body := appendTo(t, otherURL, "acme", tok2, "after takeover")
		if s != 200 {
			return fmt.Errorf("after the holder stopped: %d %s", s, body)
		}
		return json.Unmarshal(body, &after)
	})
	// 22 leaves before, plus any append a poll above made in the moment before a
	// revocation or disable reached it.
	if after.Inclusion.LeafIndex < 22 || after.Inclusion.TreeSize != after.Inclusion.LeafIndex+1 {
		t.Fatalf("the first append after takeover: index %d of %d", after.Inclusion.LeafIndex, after.Inclusion.TreeSize)
	}
	if other.Sequencer("acme") == nil {
		t.Fatal("the remaining process does not run acme's sequencer")
	}
	testkit.Eventually(t, 2*time.Second, func() error {
		resp, err := http.Get(otherURL + "/t/acme/root")
		if err != nil {
			return err
		}
		var r struct{ TreeSize uint64 }
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if r.TreeSize != after.Inclusion.TreeSize {
			return fmt.Errorf("size after takeover %d, want %d", r.TreeSize, after.Inclusion.TreeSize)
		}
		return nil
	})
}

// TestHostedRestart: a database-backed process restarted on its directory serves its
// tenants again from the events and the log of record: same leaves, same tokens,
// appends continue at the next index.
func TestHostedRestart(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	dir := t.TempDir()
	a, url := frontEndIn(t, dir, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tok := addTenant(t, a, "acme")
	for i := range 5 {
		if s, body := appendTo(t, url, "acme", tok, fmt.Sprintf("before %d", i)); s != 200 {
			t.Fatalf("append: %d %s", s, body)
		}
	}
	a.Close()
	_, url2 := frontEndIn(t, dir, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	s, body := appendTo(t, url2, "acme", tok, "after restart")
	if s != 200 {
		t.Fatalf("append after restart: %d %s", s, body)
	}
	var p receipt.Proof
	if err := json.Unmarshal(body, &p); err != nil || p.Inclusion.LeafIndex != 5 || p.Inclusion.TreeSize != 6 {
		t.Fatalf("after restart: index %d size %d (%v), want 5 and 6", p.Inclusion.LeafIndex, p.Inclusion.TreeSize, err)
	}
	// A leaf appended before the restart is answered at its index, not appended again.
	if s, body := appendTo(t, url2, "acme", tok, "before 2"); s != 200 || !strings.Contains(string(body), `"leafIndex":2`) {
		t.Fatalf("retry of an old leaf: %d %s", s, body)
	}
}

// TestAppendsNeedNoDatabase: with the database refusing connections, appends are
// still answered (PostgreSQL is off the append path); once it answers again the
// usage projection catches up with every append.
func TestAppendsNeedNoDatabase(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	ctx := context.Background()
	a, url := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tok := addTenant(t, a, "acme")
	su, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	name := dbURL[strings.LastIndex(dbURL, "/")+1:]
	if _, err := su.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := su.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if s, body := appendTo(t, url, "acme", tok, fmt.Sprintf("no database %d", i)); s != 200 {
			t.Fatalf("append %d with the database down: %d %s", i, s, body)
		}
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the service stopped with the database down: %v", err)
	default:
	}
	if _, err := su.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	month := time.Now().UTC().Format("2006-01")
	testkit.Eventually(t, 40*time.Second, func() error {
		appends, leaves, err := st.Usage(ctx, "acme", month)
		if err != nil || appends != 30 || leaves != 30 {
			return fmt.Errorf("usage in the database: %d appends, %d leaves, %v; want 30, 30", appends, leaves, err)
		}
		return nil
	})
}
