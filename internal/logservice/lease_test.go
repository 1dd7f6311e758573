package logservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

// TestLostLeaseStepsDown: when another holder takes a tenant's lease, the process
// stops only that tenant's sequencer and serves it read-only as a standby; its other
// tenants go on appending and the process does not stop. When the lease is free again
// the standby takes the tenant back and its indices continue.
func TestLostLeaseStepsDown(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEnd(t, srv.ClientURL(), dbURL, key)
	tokA, tokB := addTenant(t, a, "acme"), addTenant(t, a, "beta")
	for i := range 3 {
		for _, tt := range []struct{ tenant, tok string }{{"acme", tokA}, {"beta", tokB}} {
			if s, body := appendTo(t, url, tt.tenant, tt.tok, fmt.Sprintf("before %d", i)); s != 200 {
				t.Fatalf("%s append: %d %s", tt.tenant, s, body)
			}
		}
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Another holder takes acme's lease (and keeps it while the test looks).
	stolen := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(stolen)
		for {
			e, err := kv.Get(ctx, "acme")
			if err == nil && string(e.Value()) == "thief" {
				return
			}
			if err == nil {
				_, _ = kv.Update(ctx, "acme", []byte("thief"), e.Revision())
			} else {
				_, _ = kv.Create(ctx, "acme", []byte("thief"))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	keep := make(chan struct{})
	go func() { // renew the thief's lease until told to let go
		<-stolen
		for {
			select {
			case <-keep:
				return
			case <-time.After(500 * time.Millisecond):
				if e, err := kv.Get(ctx, "acme"); err == nil && string(e.Value()) == "thief" {
					_, _ = kv.Update(ctx, "acme", []byte("thief"), e.Revision())
				}
			}
		}
	}()
	defer close(stop)
	testkit.Eventually(t, 10*time.Second, func() error {
		if a.isHeld("acme") {
			return errors.New("the process still runs acme's sequencer")
		}
		return nil
	})
	if !a.isHeld("beta") {
		t.Fatal("losing acme's lease also stopped beta's sequencer")
	}
	for i := range 3 {
		if s, body := appendTo(t, url, "beta", tokB, fmt.Sprintf("during %d", i)); s != 200 {
			t.Fatalf("beta append while acme's lease is held elsewhere: %d %s", s, body)
		}
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
	// The thief lets go: the lease runs out and this process takes acme back.
	close(keep)
	testkit.Eventually(t, 15*time.Second, func() error {
		if !a.isHeld("acme") {
			return errors.New("acme not taken back")
		}
		return nil
	})
	s, body := appendTo(t, url, "acme", tokA, "after")
	var p receipt.Proof
	if s != 200 || json.Unmarshal(body, &p) != nil || p.Inclusion.LeafIndex != 3 {
		t.Fatalf("acme after taking it back: %d %s, want index 3", s, body)
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
}
