package tenancy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// SnapshotBucket is the JetStream object store holding the fold of SVC_ADMIN (the
// view's tenants and token hashes) with the stream sequence it reached, so a start
// reads the snapshot and only the events after it instead of the whole stream.
const SnapshotBucket = "svc_admin_snapshot"

// SnapshotEvery is how many events a writing view applies between two snapshots.
const SnapshotEvery = 256

// snapshotObject is the object's name in SnapshotBucket.
const snapshotObject = "view"

// maxSnapshot caps what a start reads back (gzip'd JSON; 10,000 tenants with a token
// each are about 1 MB).
const maxSnapshot = 256 << 20

// snapshot is the stored form of the fold (Tenant's JSON form hides token hashes).
type snapshot struct {
	Seq     uint64           `json:"seq"`
	Tenants []snapshotTenant `json:"tenants"`
}

type snapshotTenant struct {
	Tenant
	Tokens []snapshotToken `json:"tokens"`
}

type snapshotToken struct {
	Token
	Hash string `json:"hash"`
}

// StartStats says what Start read: the snapshot's stream sequence (0: none) and the
// events read from the stream after it.
type StartStats struct {
	SnapshotSeq uint64
	Events      int
}

// WriteSnapshots makes the view store a snapshot in store every SnapshotEvery events
// it applies (the log server's view does; log-admin's and the portal's only read).
// Call before Start.
func (v *View) WriteSnapshots(store jetstream.ObjectStore) { v.snapStore = store }

// Stats is what the last Start read.
func (v *View) Stats() StartStats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.stats
}

// restore loads the newest snapshot, if any, unless it is ahead of the stream (a
// stream made anew: the snapshot belongs to another history). Nothing is changed
// when it fails.
func (v *View) restore(ctx context.Context, lastSeq uint64) error {
	store := v.snapStore
	if store == nil {
		s, err := v.js.ObjectStore(ctx, SnapshotBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		store = s
	}
	r, err := store.Get(ctx, snapshotObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	zr, err := gzip.NewReader(io.LimitReader(r, maxSnapshot))
	if err != nil {
		return err
	}
	var snap snapshot
	if err := json.NewDecoder(io.LimitReader(zr, 4*maxSnapshot)).Decode(&snap); err != nil {
		return err
	}
	if snap.Seq > lastSeq {
		return fmt.Errorf("snapshot at sequence %d is ahead of the stream (%d): ignored", snap.Seq, lastSeq)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, st := range snap.Tenants {
		t := st.Tenant
		t.Tokens = nil
		for _, k := range st.Tokens {
			k.Token.Hash = k.Hash
			t.Tokens = append(t.Tokens, k.Token)
			if h, ok := parseHash(k.Hash); ok && k.RevokedAt == "" {
				v.live[h] = t.ID
			}
		}
		v.tenants[t.ID] = &t
	}
	v.seq, v.snapSeq, v.stats.SnapshotSeq = snap.Seq, snap.Seq, snap.Seq
	return nil
}

// maybeSnapshot stores a snapshot in the background when SnapshotEvery events were
// applied since the last one and none is being written.
func (v *View) maybeSnapshot(ctx context.Context) {
	v.mu.Lock()
	due := v.snapStore != nil && !v.snapping && v.seq >= v.snapSeq+SnapshotEvery
	if due {
		v.snapping = true
	}
	v.mu.Unlock()
	if !due {
		return
	}
	go func() {
		seq, err := v.writeSnapshot(ctx)
		v.mu.Lock()
		v.snapping = false
		if err == nil {
			v.snapSeq = seq
		}
		v.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			v.log.Warn("admin snapshot not stored; the next start replays more of SVC_ADMIN", "err", err)
		}
	}()
}

// writeSnapshot stores the fold as it is now.
func (v *View) writeSnapshot(ctx context.Context) (uint64, error) {
	v.mu.RLock()
	snap := snapshot{Seq: v.seq, Tenants: make([]snapshotTenant, 0, len(v.tenants))}
	for _, t := range v.tenants {
		st := snapshotTenant{Tenant: t.clone()}
		for _, k := range t.Tokens {
			st.Tokens = append(st.Tokens, snapshotToken{Token: k, Hash: k.Hash})
		}
		st.Tenant.Tokens = nil
		snap.Tenants = append(snap.Tenants, st)
	}
	v.mu.RUnlock()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(snap); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	meta := jetstream.ObjectMeta{Name: snapshotObject, Description: "fold of SVC_ADMIN at stream sequence " + strconv.FormatUint(snap.Seq, 10)}
	if _, err := v.snapStore.Put(ctx, meta, &buf); err != nil {
		return 0, fmt.Errorf("tenancy: admin snapshot at %d: %w", snap.Seq, err)
	}
	return snap.Seq, nil
}
