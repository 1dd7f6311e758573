package tenancy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A flood of concurrent catch-ups of one tenant (what wrong tokens from many
// addresses cost: each is rechecked against the broker) shares broker round trips,
// counted from outside by a subscriber to the JetStream API; and while the flood goes
// on, a token another process minted a moment ago is accepted by this one at once:
// a catch-up that arrives during a round waits for the next one, which began after it.
func TestCatchUpsShareRoundTrips(t *testing.T) {
	connect := broker(t)
	a1, _ := process(t, connect)
	ctx := context.Background()
	// The second process's view applies each event 20 ms after the one before it (a
	// process under load): a catch-up answered by a round that began before a token
	// was minted would miss it.
	_, js := connect()
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v2 := NewView(js, nil, func(Tenant) { time.Sleep(20 * time.Millisecond) })
	if err := v2.Start(vctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.AddTenant(ctx, "test", "acme", ""); err != nil {
		t.Fatal(err)
	}
	nc, js2 := connect()
	var asked atomic.Int64 // requests for the newest message of an admin subject
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, "SVC_ADMIN") && (strings.Contains(m.Subject, "DIRECT.GET") || strings.Contains(m.Subject, "MSG.GET")) {
			asked.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	if err := v2.CatchUp(ctx, js2, "acme"); err != nil { // the stream handle is looked up once
		t.Fatal(err)
	}
	waitCounted := func() int64 {
		nc.Flush()
		time.Sleep(100 * time.Millisecond)
		return asked.Load()
	}
	before := waitCounted()
	if before == 0 {
		t.Fatal("the subscriber saw no catch-up request: it counts nothing")
	}

	const flood = 1000
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range flood {
		wg.Go(func() {
			<-start
			if err := v2.CatchUp(ctx, js2, "acme"); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	rounds := waitCounted() - before
	t.Logf("%d concurrent catch-ups: %d broker round trips", flood, rounds)
	if rounds > flood/4 {
		t.Fatalf("%d concurrent catch-ups cost %d broker round trips; want them shared (at most %d)", flood, rounds, flood/4)
	}

	// Fresh tokens under a flood that keeps rounds running all the time.
	stop := make(chan struct{})
	var flooders sync.WaitGroup
	for range 50 {
		flooders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v2.CatchUp(ctx, js2, "acme")
			}
		})
	}
	defer func() { close(stop); flooders.Wait() }()
	for i := range 20 {
		token, _, err := a1.AddToken(ctx, "test", "acme", "fresh")
		if err != nil {
			t.Fatal(err)
		}
		if err := v2.CatchUp(ctx, js2, "acme"); err != nil {
			t.Fatal(err)
		}
		if !v2.Authorized("acme", token) {
			t.Fatalf("token %d, minted a moment ago by another process: refused after a catch-up during the flood", i)
		}
		tn, _ := v2.Tenant("acme")
		if _, err := a1.RevokeToken(ctx, "test", "acme", tn.Tokens[len(tn.Tokens)-1].TokenHash); err != nil { // stay under the live-key cap
			t.Fatal(err)
		}
	}
}
