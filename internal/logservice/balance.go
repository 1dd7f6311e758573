package logservice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MembersBucket is the KV bucket of live log processes: key = the process (its lease
// id with the characters a key cannot hold replaced), value = how many tenants'
// sequencers it runs. Entries live for the lease TTL and are put every TTL/3, so a
// dead process drops out as its leases do.
const MembersBucket = "svc_log_processes"

// memberKey is id as a KV key (letters, digits, '-', '_', '=', '.' and '/' only).
func memberKey(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./", r) {
			return r
		}
		return '_'
	}, strings.Trim(id, "/."))
}

// heldCount is how many tenants this process sequences.
func (st *hostedState) heldCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.held)
}

// loads reads every live process's count of held tenants (this one's included). An
// entry more than LeaseTTL/2 older than the newest (two missed announcements; times
// are the broker's, so hosts' clocks do not matter) is a process that died and is
// left out, so nobody defers to it.
func (st *hostedState) loads(ctx context.Context) (map[string]int, error) {
	keys, err := st.members.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = keys.Stop() }()
	var entries []jetstream.KeyValueEntry
	var newest time.Time
	for k := range keys.Keys() {
		if e, err := st.members.Get(ctx, k); err == nil { // else gone since listed
			entries = append(entries, e)
			newest = later(newest, e.Created())
		}
	}
	out := map[string]int{}
	for _, e := range entries {
		if n, err := strconv.Atoi(string(e.Value())); err == nil && newest.Sub(e.Created()) <= st.cfg.LeaseTTL/2 {
			out[e.Key()] = n
		}
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// leave removes this process from the process bucket (a clean stop), before its
// leases are released, so no standby defers to a process that is going away. Every
// lease's renewal and the balancer ask at the stop; the first does it, the others
// wait for it.
func (st *hostedState) leave() {
	st.left.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = st.members.Delete(ctx, memberKey(st.id))
	})
}

// balance announces this process every TTL/3 with the number of tenants it holds,
// and hands one tenant to another process when it holds more than its fair share,
// ceil(active tenants held by all / live processes), while some process holds at
// least two fewer (an idle tenant is held by none). One
// tenant per round, so the counts the others announce catch up in between.
func (s *Service) balance(ctx context.Context) error {
	st := s.hosted
	me := memberKey(st.id)
	tick := time.NewTicker(st.cfg.LeaseTTL / 3)
	defer tick.Stop()
	defer st.leave()
	for {
		if _, err := st.members.Put(ctx, me, []byte(strconv.Itoa(st.heldCount()))); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("announcing this process failed", "err", err)
		} else if tenant := st.surplus(ctx, me); tenant != "" {
			if err := s.stepDown(st.runCtx, tenant, "a less loaded process can take it"); err != nil && ctx.Err() == nil {
				st.refuse(tenant, fmt.Errorf("handing over: %w", err), s.cfg.Logger)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// surplus names a tenant this process should hand over, or "".
func (st *hostedState) surplus(ctx context.Context, me string) string {
	loads, err := st.loads(ctx)
	if err != nil || len(loads) < 2 {
		return ""
	}
	st.mu.Lock()
	held := slices.Sorted(maps.Keys(st.held))
	st.mu.Unlock()
	active := 0 // tenants held by any process: only active tenants are held
	for _, n := range loads {
		active += n
	}
	fair := (active + len(loads) - 1) / len(loads)
	least := len(held)
	for k, n := range loads {
		if k != me {
			least = min(least, n)
		}
	}
	if len(held) <= fair || least > len(held)-2 {
		return ""
	}
	return held[len(held)-1]
}

// shouldDefer reports whether this process should leave a free lease to another for a
// moment: some live process announces fewer held tenants than this one.
func (st *hostedState) shouldDefer(ctx context.Context) bool {
	loads, err := st.loads(ctx)
	if err != nil {
		return false
	}
	me, mine := memberKey(st.id), st.heldCount()
	for k, n := range loads {
		if k != me && n < mine {
			return true
		}
	}
	return false
}

// tryLease creates tenant's lease for this process. When the holder released the
// lease (a hand-over), a process that holds more tenants than another live one first
// leaves it to the less loaded for LeaseTTL/2 (it is still taken when nobody else
// does). A lease that ran out (its holder died) is taken at once: the outage already
// lasted a TTL, and the spread is restored by hand-overs afterwards.
// The error, when there is one, is why the lease could not be created (the broker's
// or ErrKeyExists); false with nil: it was left to another process for now.
func (st *hostedState) tryLease(ctx context.Context, tenant string, released bool, freeSince *time.Time) (bool, error) {
	if (released || !freeSince.IsZero()) && st.shouldDefer(ctx) {
		_, err := st.kv.Get(ctx, tenant)
		if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			*freeSince = time.Time{}
			return false, err
		}
		if freeSince.IsZero() {
			*freeSince = time.Now()
		}
		if time.Since(*freeSince) < st.cfg.LeaseTTL/2 {
			return false, nil
		}
	}
	_, err := st.kv.Create(ctx, tenant, []byte(st.id))
	if errors.Is(err, jetstream.ErrKeyExists) {
		// This process's own lease, left when its renewals failed for a while (a
		// broker election): nobody can have taken it since, so take it back now
		// (compare-and-set on its revision) rather than wait for it to run out.
		if e, gerr := st.kv.Get(ctx, tenant); gerr == nil && string(e.Value()) == st.id {
			_, err = st.kv.Update(ctx, tenant, []byte(st.id), e.Revision())
		}
	}
	return err == nil, err
}
