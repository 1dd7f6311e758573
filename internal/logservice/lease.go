package logservice

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// The sequencer lease of a hosted tenant: its bucket, how a standby waits for it,
// how its holder renews and releases it (the fence in the log of record remains
// the safety net; docs/design/log-service.md).

// LeaseBucket is the KV bucket of sequencer leases: key = tenant, value = holder.
const LeaseBucket = "svc_sequencer_leases"

// DefaultLeaseTTL bounds a tenant's outage after its holder dies (a standby takes
// the lease within about LeaseTTL + LeaseTTL/4). A lease bucket election, 4-9 s or
// longer after a node's crash, outlasts it; the holder commits on through it
// (Hosted.BucketElection), so the TTL is not what bounds the cost of an election.
const DefaultLeaseTTL = 5 * time.Second

// DefaultBucketElection is the default of Hosted.BucketElection. nats-server elects
// a Raft group's new leader 4-9 s (its election timeout) after the old one crashed,
// and a vote that fails starts another timeout: the lease bucket took 13.6 s once
// (docs/measurements/2026-12-08-cluster-crash-gap.md). Twenty seconds covers two
// rounds; the longer it is, the longer a holder that reaches SVC_LEAVES but not
// the bucket's leader (a partition that is not transitive) may overlap with a
// standby that took its lease, the fence deciding between them.
const DefaultBucketElection = 20 * time.Second

// leaseStorage is where the lease bucket keeps its keys: in memory (replicated like
// any stream with --replicas), since a lease lives for a TTL of seconds and a broker
// that loses it (a full restart) only makes the holders create it again, while on
// disk every lease's creation and renewal was an fsynced write: the largest part of a
// tenant's start (about 50 of 70 ms with 8 starts at once) and of an idle process's
// CPU. A bucket an older version made on disk stays there (a stream's storage cannot
// change, and processes of both versions must share one bucket).
// An error other than "no such bucket" is returned (the start's Retry tries again):
// guessing memory then would ask the broker to change an existing bucket's storage.
func leaseStorage(ctx context.Context, js jetstream.JetStream) (jetstream.StorageType, error) {
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return jetstream.MemoryStorage, nil
	}
	if err != nil {
		return 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok && b.StreamInfo().Config.Storage == jetstream.FileStorage {
		return jetstream.FileStorage, nil
	}
	return jetstream.MemoryStorage, nil
}

// awaitLease returns once this process holds tenant's lease (nil) or ctx ends. It
// tries at once when the holder releases the lease (a clean stop deletes it) and
// every LeaseTTL/4 otherwise, since a lease that ran out leaves no marker to watch.
// When own is not nil (this process hands the tenant over), it first waits until own
// is closed (its holding released the lease), then tries at once as after a release:
// tryLease takes back a lease that names this process, which during a slow hand-over
// would be the holding's own, still renewed, and never released.
func (st *hostedState) awaitLease(ctx context.Context, tenant string, own <-chan struct{}) error {
	released := make(chan struct{}, 1)
	if own != nil {
		select {
		case <-own:
			released <- struct{}{}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if w, err := st.kv.Watch(ctx, tenant, jetstream.UpdatesOnly()); err == nil {
		defer func() { _ = w.Stop() }()
		go func() {
			for e := range w.Updates() {
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					select {
					case released <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	tick := time.NewTicker(st.cfg.LeaseTTL / 8)
	defer tick.Stop()
	var freeSince time.Time
	grace := leaseGrace{after: st.cfg.LeaseTTL}
	for n := 0; ; n++ {
		woken := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n%2 == 0 && freeSince.IsZero() && !grace.pending() {
				continue // every LeaseTTL/4, unless a deferred free lease is pending
			}
		case <-released:
			woken = true
		}
		if grace.wait(ctx, st.kv) {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, renewAttempt)
		took, err := st.tryLease(actx, tenant, woken, &freeSince)
		cancel()
		if took {
			return nil
		}
		grace.failed(ctx.Err() == nil && pipeline.Transient(err))
	}
}

// leaseGrace keeps a standby from taking a lease that ran out while the lease
// bucket had no leader (a node's crash: an election longer than the TTL). The
// holder, alive, goes on committing through the election while the bucket's
// replicas show no other holder (leaseRuns.electing) and renews it (re-creates it)
// within about a second of the bucket's return, retrying every renewRetry; so a
// standby that could not reach the bucket waits a whole lease TTL after it has a
// leader again before it tries Create. A holder that renews meanwhile keeps its
// lease (the standby's Create finds the key). With a 1.5 s wait, a holder whose
// renewal came later (a slow round trip under load) lost its tenant to a standby
// while it was still committing: two active sequencers, which the fence then sorted
// out; with none, the standby won the race about one time in three
// (docs/measurements/2026-11-27-cluster-faults.md). A holder that died meanwhile
// costs its tenants the wait: a lease TTL more.
type leaseGrace struct {
	after time.Duration // the wait after the bucket has a leader again: the lease TTL
	down  bool          // the last attempt found the bucket unreachable
	back  time.Time     // when it answered again; zero: no grace under way
}

// failed records whether the last attempt on the bucket timed out.
func (g *leaseGrace) failed(down bool) {
	if down {
		g.down, g.back = true, time.Time{}
	}
}

// pending reports whether the bucket was down or a grace runs.
func (g *leaseGrace) pending() bool { return g.down || !g.back.IsZero() }

// wait reports whether this attempt must be skipped: the bucket is still down (it
// probes it), it just came back, or the grace is not over.
func (g *leaseGrace) wait(ctx context.Context, kv jetstream.KeyValue) bool {
	if g.down {
		actx, cancel := context.WithTimeout(ctx, renewAttempt)
		led := bucketLed(actx, kv)
		cancel()
		if !led {
			return true
		}
		g.down, g.back = false, time.Now()
		return true
	}
	if !g.back.IsZero() && time.Since(g.back) < g.after {
		return true
	}
	g.back = time.Time{}
	return false
}

// bucketLed reports whether the lease bucket has a leader, which a write (a renewal,
// a Create) needs. A read of a key does not tell: a bucket allows direct gets, which
// any replica answers while the bucket elects its leader, so a standby that probed
// with one ended its grace during the election and won the lease back from a living
// holder when its Create landed first after it (kill -9 of the node leading the
// bucket, 2 of 4 rounds: docs/measurements/2026-11-27-cluster-crash-gap.md).
func bucketLed(ctx context.Context, kv jetstream.KeyValue) bool {
	st, err := kv.Status(ctx)
	if err != nil {
		return false
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return true
	}
	ci := bs.StreamInfo().Cluster
	return ci == nil || ci.Leader != ""
}

// holdAfter is how long after sending its last successful renewal a holder may
// commit: the lease is valid for the TTL from the broker's stamp of that renewal,
// which comes after it was sent, so commits stop a tenth of the TTL (0.5 s at 5 s)
// before anyone could take it. Two thirds of the TTL (an earlier choice) held the
// commits 1.2 s sooner during every lease bucket election, for no safety: the lease
// is still valid then, and the fence remains the safety net.
func (st *hostedState) holdAfter() time.Duration { return st.cfg.LeaseTTL - st.cfg.LeaseTTL/10 }

// A failed renewal is tried again after renewRetry, each attempt for at most
// renewAttempt, so held commits go on within about renewRetry + a round trip of
// the lease bucket's election instead of at the next tick (LeaseTTL/3).
const (
	renewAttempt = time.Second
	renewRetry   = 100 * time.Millisecond
)

// renewOnce renews tenant's lease by compare-and-set: mine is false when another
// process holds it. A lease that ran out (nobody took it) is taken again. With the
// revision of its last renewal (last), one update does it while nobody else wrote
// the key (one fsynced write, no read); otherwise it reads who holds it first.
func (st *hostedState) renewOnce(ctx context.Context, tenant string, last uint64, deadline time.Time) (rev uint64, mine bool, err error) {
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if last != 0 {
		if rev, err = st.kv.Update(actx, tenant, []byte(st.id), last); err == nil {
			return rev, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, false, err
		}
	}
	e, err := st.kv.Get(actx, tenant)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		rev, err = st.kv.Create(actx, tenant, []byte(st.id))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, nil // another process took it in between
		}
		return rev, err == nil, err
	case err != nil:
		return 0, false, err
	case string(e.Value()) != st.id:
		return 0, false, nil
	}
	rev, err = st.kv.Update(actx, tenant, []byte(st.id), e.Revision())
	return rev, err == nil, err
}

// release hands tenant over at once on a clean stop: it deletes the lease when it is
// still this process's (revision rev, or unknown before the first renewal), which
// wakes the standbys' watches.
func (st *hostedState) release(tenant string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if rev == 0 {
		e, err := st.kv.Get(ctx, tenant)
		if err != nil || string(e.Value()) != st.id {
			return
		}
		rev = e.Revision()
	}
	_ = st.kv.Delete(ctx, tenant, jetstream.LastRevision(rev))
}
