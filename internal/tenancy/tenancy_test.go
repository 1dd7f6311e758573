package tenancy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
)

// broker starts an embedded nats-server with the streams and returns a function
// that opens a new connection (one per simulated process).
func broker(t *testing.T) func() (*nats.Conn, jetstream.JetStream) { return testkit.Broker(t) }

// process is one simulated log server process: its own connection and view.
func process(t *testing.T, connect func() (*nats.Conn, jetstream.JetStream)) (*Admin, *View) {
	t.Helper()
	_, js := connect()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v := NewView(js, nil, nil)
	if err := v.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return &Admin{JS: js, View: v}, v
}

func TestTenantIDUniqueByBroker(t *testing.T) {
	connect := broker(t)
	a1, _ := process(t, connect)
	a2, v2 := process(t, connect)
	ctx := context.Background()
	for round := range 5 {
		id := fmt.Sprintf("race-%d", round)
		var ok, exists atomic.Int32
		var wg sync.WaitGroup
		for _, a := range []*Admin{a1, a2, a1, a2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := a.AddTenant(ctx, "test", id, "")
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrTenantExists):
					exists.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 || exists.Load() != 3 {
			t.Fatalf("%s: %d creations succeeded and %d were told it exists; want 1 and 3", id, ok.Load(), exists.Load())
		}
		testkit.Eventually(t, time.Second, func() error {
			if _, found := v2.Tenant(id); !found {
				return fmt.Errorf("second process does not see %s", id)
			}
			return nil
		})
	}
	if _, err := a1.AddTenant(ctx, "test", "Bad Id", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid id: got %v, want ErrInvalid", err)
	}
}

func TestTokenLifecycleAcrossProcesses(t *testing.T) {
	connect := broker(t)
	a1, v1 := process(t, connect)
	_, v2 := process(t, connect)
	ctx := context.Background()
	for _, id := range []string{"acme", "globex"} {
		if _, err := a1.AddTenant(ctx, "alice@host", id, "log.example/"+id); err != nil {
			t.Fatal(err)
		}
	}
	token, tok, err := a1.AddToken(ctx, "alice@host", "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if len(token) != 64 || len(tok.TokenHash) != 12 {
		t.Fatalf("token %q (want 64 hex), prefix %q (want 12 hex)", token, tok.TokenHash)
	}
	// The creating process answers only after its own view applied the event.
	if !v1.Authorized("acme", token) {
		t.Fatal("the new token is not accepted by the process that created it")
	}
	testkit.Eventually(t, time.Second, func() error {
		if !v2.Authorized("acme", token) {
			return errors.New("second process does not accept the new token")
		}
		return nil
	})
	if v2.Authorized("globex", token) {
		t.Fatal("acme's token is accepted for globex")
	}
	wrong := token[:63] + "0"
	if token[63] == '0' { // a wrong token differs from the real one in its last digit
		wrong = token[:63] + "1"
	}
	if v2.Authorized("acme", wrong) || v2.Authorized("acme", "") {
		t.Fatal("a wrong or empty token is accepted")
	}
	if _, err := a1.RevokeToken(ctx, "alice@host", "globex", tok.TokenHash); !errors.Is(err, ErrNoToken) {
		t.Fatalf("revoking acme's token through globex: got %v, want ErrNoToken", err)
	}
	if n, err := a1.RevokeToken(ctx, "alice@host", "acme", tok.TokenHash); err != nil || n != 1 {
		t.Fatalf("revoke: %d, %v", n, err)
	}
	revokedAt := time.Now()
	testkit.Eventually(t, time.Second, func() error {
		if v2.Authorized("acme", token) {
			return errors.New("second process still accepts the revoked token")
		}
		return nil
	})
	if d := time.Since(revokedAt); d > time.Second {
		t.Fatalf("revocation took %s to reach the second process", d)
	}
	tn, _ := v2.Tenant("acme")
	if tn.LiveTokens() != 0 || len(tn.Tokens) != 1 || tn.Tokens[0].RevokedAt == "" || tn.Plan != PlanFree {
		t.Fatalf("folded tenant: %+v", tn)
	}
	if _, err := a1.SetPlan(ctx, "alice@host", "acme", "team"); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.SetPlan(ctx, "alice@host", "acme", "gold"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown plan: got %v", err)
	}
	if _, err := a1.DisableTenant(ctx, "alice@host", "nobody"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("disable unknown: got %v", err)
	}
	// A third process started now folds the same state from the stream.
	_, v3 := process(t, connect)
	got, _ := v3.Tenant("acme")
	if got.Plan != PlanTeam || got.LogID != "log.example/acme" || len(got.Tokens) != 1 || got.Tokens[0].RevokedAt == "" {
		t.Fatalf("a fresh process folds %+v", got)
	}
}
