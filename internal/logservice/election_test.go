package logservice

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/internal/testkit"
)

// The lease rules through a lease bucket election (docs/design/cluster.md,
// "Leadership protocol"). A nats-server whose user "cut" may read the lease bucket
// (a direct get, which any replica answers while the bucket elects) but whose writes
// to it and stream info requests on it go unanswered (denied publications: no reply,
// the request times out) stands for a bucket without a leader, as seen by a process
// connected to one of its replicas; reloading the server with the user's full rights
// is the bucket's return.

const electionPassword = "pw-of-election-tests"

// electionBroker starts the server with the bucket electing, as user "cut" sees it;
// lead ends the election (a reload with user "cut"'s full rights).
func electionBroker(t *testing.T) (srv *server.Server, lead func()) {
	t.Helper()
	dir := t.TempDir()
	srv = testkit.StartServer(t, electionOpts(dir, true))
	return srv, func() {
		if err := srv.ReloadOptions(electionOpts(dir, false)); err != nil {
			t.Fatal(err)
		}
	}
}

// electionOpts configures the server: user "cut" sees an electing lease bucket
// (electing) or a led one; user "full" always sees a led one.
func electionOpts(dir string, electing bool) *server.Options {
	cut := &server.User{Username: "cut", Password: electionPassword}
	if electing {
		cut.Permissions = &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{
			"$KV." + LeaseBucket + ".>", "$JS.API.STREAM.INFO.KV_" + LeaseBucket,
		}}}
	}
	return &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "full", Password: electionPassword}, cut}}
}

// leaseBucket opens the lease bucket (TTL ttl) as user.
func leaseBucket(t *testing.T, srv *server.Server, user string, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, electionPassword), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js := testkit.JetStream(t, nc)
	kv, err := js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: LeaseBucket, TTL: ttl, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// renewingHolder runs the renewals of tenant's lease, which full creates for the
// holder "holder" and whose renewals go through kv (ttl, bound: its LeaseTTL and
// BucketElection), until the test ends. lost receives the loss, if any.
func renewingHolder(t *testing.T, full, kv jetstream.KeyValue, tenant string, ttl, bound time.Duration) (*holding, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := &hostedState{cfg: Hosted{LeaseTTL: ttl, BucketElection: bound}, kv: kv, id: "holder", runCtx: context.Background()}
	sent := time.Now()
	rev, err := full.Create(ctx, tenant, []byte(st.id))
	if err != nil {
		t.Fatal(err)
	}
	h := &holding{t: tenancy.Tenant{ID: tenant}, lease: make(chan struct{}), rev: rev}
	h.validUntil.Store(sent.Add(st.holdAfter()).UnixNano())
	l := newLeaseRuns(st, slog.New(slog.DiscardHandler))
	lost := make(chan error, 1)
	l.add(ctx, h, func(err error) { lost <- err })
	done := make(chan struct{})
	go func() { _ = l.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, lost
}

// mayCommit reports whether h's sequencer may commit now (its Hold returns at once).
func mayCommit(h *holding) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	return h.hold(ctx) == nil
}

// TestHolderCommitsThroughBucketElection: a holder whose renewals go unanswered
// while no replica that answers shows another holder (here: the key run out, read as not found) goes on committing past the lease
// (its end, holdAfter past the last renewal, is 0.9 s here), until BucketElection
// after its first unanswered renewal (3 s here); then it holds its commits.
func TestHolderCommitsThroughBucketElection(t *testing.T) {
	srv, _ := electionBroker(t)
	const ttl, bound = time.Second, 3 * time.Second
	full := leaseBucket(t, srv, "full", ttl)
	start := time.Now()
	h, lost := renewingHolder(t, full, leaseBucket(t, srv, "cut", ttl), "acme", ttl, bound)
	for time.Since(start) < 2*time.Second { // past the lease, within the bound
		if !mayCommit(h) {
			t.Fatalf("commits held %v after the last renewal, while the bucket elects and its replicas show the lease", time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if mayCommit(h) {
			return errors.New("still committing past BucketElection")
		}
		return nil
	})
	if at := time.Since(start); at < bound {
		t.Fatalf("commits held after %v, before the bound", at)
	}
	select {
	case err := <-lost:
		t.Fatalf("lease reported lost: %v", err)
	default:
	}
}

// TestHolderWhoseLeaseChangedStepsDown: through the same election, a holder whose
// key another process wrote (the replicas show it) steps down at once, not at its
// bound, and commits nothing more.
func TestHolderWhoseLeaseChangedStepsDown(t *testing.T) {
	srv, _ := electionBroker(t)
	const ttl, bound = time.Second, time.Minute
	full := leaseBucket(t, srv, "full", ttl)
	h, lost := renewingHolder(t, full, leaseBucket(t, srv, "cut", ttl), "acme", ttl, bound)
	time.Sleep(2 * ttl) // past the lease: committing on the replicas' word
	if !mayCommit(h) {
		t.Fatal("commits held while the bucket elects and its replicas show the lease")
	}
	if _, err := full.Put(context.Background(), "acme", []byte("thief")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, errLeaseLost) {
			t.Fatalf("lost with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not step down within 5 s of another process writing its key")
	}
}

// TestStandbyLeavesARenewingHolderItsLease: a standby that found the bucket without
// a leader, and then with one again and the lease run out, waits a lease TTL before
// it tries Create; a holder that re-creates its lease 3 s after the bucket's return
// (its renewal slow to land) keeps it. A standby that waited 1.5 s took it then.
func TestStandbyLeavesARenewingHolderItsLease(t *testing.T) {
	srv, lead := electionBroker(t)
	const ttl = 5 * time.Second
	full := leaseBucket(t, srv, "full", ttl)
	if _, err := full.Create(context.Background(), "acme", []byte("holder")); err != nil {
		t.Fatal(err)
	}
	st := &hostedState{cfg: Hosted{LeaseTTL: ttl, BucketElection: DefaultBucketElection}, kv: leaseBucket(t, srv, "cut", ttl), id: "standby"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	took := make(chan error, 1)
	go func() { took <- st.awaitLease(ctx, "acme", nil) }()
	// The lease runs out while the bucket elects; the standby's attempts time out.
	testkit.Eventually(t, 3*ttl, func() error {
		if _, err := full.Get(context.Background(), "acme"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("the lease has not run out yet")
		}
		return nil
	})
	time.Sleep(2 * renewAttempt) // an attempt of the standby's found the bucket down
	lead()
	back := time.Now()
	time.Sleep(3 * time.Second)
	rev, err := full.Create(context.Background(), "acme", []byte("holder"))
	if err != nil {
		t.Fatalf("the holder's re-creation %v after the bucket's return: %v (the standby took the lease)", time.Since(back).Round(time.Millisecond), err)
	}
	go func() { // the holder renews it from then on
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			if r, err := full.Update(ctx, "acme", []byte("holder"), rev); err == nil {
				rev = r
			}
		}
	}()
	select {
	case err := <-took:
		t.Fatalf("the standby's wait ended (%v) while the holder re-created its lease", err)
	case <-time.After(ttl):
	}
	if e, err := full.Get(context.Background(), "acme"); err != nil || string(e.Value()) != "holder" {
		t.Fatalf("the lease after the standby's wait: %v %v, want the holder's", e, err)
	}
}
