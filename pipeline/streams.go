package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
)

// Stream names and subject prefixes.
const (
	AppendStream = "SVC_APPEND"
	LeavesStream = "SVC_LEAVES"
	AppendPrefix = "svc.append."
	LeavesPrefix = "svc.leaves."
	AdminStream  = "SVC_ADMIN"
	AdminPrefix  = "svc.admin."
	// DirectPrefix is where a request SVC_APPEND did not acknowledge storing is sent
	// again over core NATS, to the tenant's holder alone (no stream captures it):
	// see DirectSubject.
	DirectPrefix = "svc.direct."
)

// Header names of the wire formats.
const (
	HeaderReply  = "Svc-Reply"  // append request: the producer's inbox
	HeaderKind   = "Svc-Kind"   // append request: "leaf" or "hash"
	HeaderStatus = "Svc-Status" // append reply: "ok", or why it was refused ("quota", "unavailable", ...)
	HeaderFirst  = "Svc-First"  // batch: index of its first leaf
	HeaderCount  = "Svc-Count"  // batch: number of leaves
)

// AppendSubject is the subject append requests for tenant go to.
func AppendSubject(tenant string) string { return AppendPrefix + tenant }

// DirectSubject is the subject of tenant's direct copies: a Client whose request
// SVC_APPEND has not acknowledged storing within its ResendAfter (the stream's leader
// was lost: Raft elects another in 4-9 s) publishes a copy there too, at most once per
// ResendAfter, and the tenant's holder hands it to the sequencer beside the requests
// of its consumer on SVC_APPEND. The request then waits for SVC_LEAVES alone, not
// also for the elections of SVC_APPEND and of that consumer. A copy is not durable:
// lost with the holder, the stream's copy (once stored) or the producer's retry
// carries the request, as without it; a request that arrives both ways is answered
// twice with one index (the sequencer's idempotency).
func DirectSubject(tenant string) string { return DirectPrefix + tenant }

// AdminSubject is the subject of tenant's administrative events.
func AdminSubject(tenant string) string { return AdminPrefix + tenant }

// LeavesSubject is the subject of tenant's committed batches.
func LeavesSubject(tenant string) string { return LeavesPrefix + tenant }

// StreamConfig sizes the streams.
type StreamConfig struct {
	Replicas int // 1 for a single node; 3 in a cluster
}

// RecordStream is what every stream of record shares: subjects <prefix>>, limits
// retention, file storage, at least one replica. Its owner adds what is its own (how
// long messages stay, the duplicate window, the message size).
func RecordStream(name, prefix, description string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: description,
		Subjects:    []string{prefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// EnsureStreams creates or updates the streams; safe to call from every process at
// start.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	leaves := RecordStream(LeavesStream, LeavesPrefix, "committed batches of leaves: the log of record", cfg.Replicas)
	leaves.Duplicates = 2 * time.Minute
	leaves.MaxMsgSize = MaxBatchBytes + 4096
	admin := RecordStream(AdminStream, AdminPrefix, "administrative events (tenants, tokens, plans): the audit trail's source", cfg.Replicas)
	admin.Duplicates = 2 * time.Minute
	streams := []jetstream.StreamConfig{{
		Name:        AppendStream,
		Description: "append requests; answered by the tenant's sequencer",
		Subjects:    []string{AppendPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.MemoryStorage,
		Replicas:    max(cfg.Replicas, 1),
		MaxAge:      2 * time.Minute, // a producer has given up on anything older
		Discard:     jetstream.DiscardOld,
	}, leaves, admin}
	for _, sc := range streams {
		if err := EnsureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	return nil
}

// EnsureStream creates stream sc or updates it, never lowering the replicas it
// already has: a tool started without --replicas (svc log-admin, svc replay) must not
// scale a cluster's R3 stream down to one copy.
func EnsureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	if st, err := js.Stream(ctx, sc.Name); err == nil {
		sc.Replicas = max(sc.Replicas, st.CachedInfo().Config.Replicas)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	return nil
}

// TenantLeaves opens SVC_LEAVES and reads the newest committed batch on tenant's
// subject; last is nil when the tenant's log is empty.
func TenantLeaves(ctx context.Context, js jetstream.JetStream, tenant string) (stream jetstream.Stream, last *jetstream.RawStreamMsg, err error) {
	if stream, err = js.Stream(ctx, LeavesStream); err != nil {
		return nil, nil, err
	}
	last, err = stream.GetLastMsgForSubject(ctx, LeavesSubject(tenant))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stream, nil, nil
	}
	return stream, last, err
}

// AdminMsg is the message that records an administrative event on SVC_ADMIN: e gets
// a random id and the time now where it has none, and v (e itself, or an event that
// embeds it) is the message's JSON on e's tenant's admin subject, deduplicated by e's
// id.
func AdminMsg(e *client.AuditEntry, v any, now time.Time) (*nats.Msg, error) {
	if e.ID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		e.ID = hex.EncodeToString(b[:])
	}
	if e.At == "" {
		e.At = receipt.FormatTime(now)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(AdminSubject(e.TenantID))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	return m, nil
}

// CloseOrdered deletes the ordered consumer c of stream s once its reader is done
// with it (a count, a replay, a read-only tree that stops), rather than leaving it on
// the stream for nats.go's inactive threshold of five minutes: consumers left over
// by thousands of tenants would reach the broker's limit of consumers per stream.
// Deferred by whoever opened c; a failure only leaves the broker to remove it later.
func CloseOrdered(s jetstream.Stream, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.DeleteConsumer(ctx, info.Name)
}
