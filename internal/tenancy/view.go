package tenancy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// Tenant is a tenant as the view folds it.
type Tenant struct {
	ID       string `json:"id"`
	LogID    string `json:"logId,omitempty"`
	Plan     string `json:"plan"`
	Disabled bool   `json:"disabled"`
	// Public: the tenant opted its log public (log.public): its entry bundles need
	// no token.
	Public    bool    `json:"public,omitempty"`
	CreatedAt string  `json:"createdAt"`
	Tokens    []Token `json:"-"`
	// Seq is the stream sequence of the tenant's last event the view applied.
	Seq uint64 `json:"-"`
}

// LiveTokens counts the tokens not revoked.
func (t *Tenant) LiveTokens() int {
	n := 0
	for _, k := range t.Tokens {
		if k.RevokedAt == "" {
			n++
		}
	}
	return n
}

// Token is a tenant's token as the view folds it: only its hash is known.
type Token struct {
	Label     string `json:"label"`
	Hash      string `json:"-"`         // hex SHA-256 of the token
	TokenHash string `json:"tokenHash"` // the 12-hex prefix responses show
	CreatedAt string `json:"createdAt"`
	RevokedAt string `json:"revokedAt,omitempty"`
}

// View is the fold of SVC_ADMIN: tenants, plans, disabled flags and tokens. Construct
// with NewView, then Start; safe for concurrent use.
type View struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu      sync.RWMutex
	tenants map[string]*Tenant
	live    map[[32]byte]string // live token hash → tenant
	seq     uint64              // stream sequence of the last applied event
	changed chan struct{}       // closed and replaced on every apply
	// Telemetry, set before Start, counts the broker retries of the following
	// goroutine (svc_broker_retries_total{loop="svc.admin.>"}); nil: none.
	Telemetry *telemetry.Telemetry
	// OnTenant, set before Start, is called (outside the view's lock, from the
	// following goroutine) with each tenant an event created or changed.
	onTenant func(Tenant)

	snapStore jetstream.ObjectStore // where this view writes snapshots (nil: it does not)
	snapSeq   uint64                // sequence of the newest snapshot read or written
	snapping  bool                  // a snapshot is being written
	stats     StartStats
	catch     catchUps // the shared broker round trips of CatchUp
}

// NewView makes an empty view of the admin stream of js. onTenant, when not nil, is
// called with every tenant an applied event created or changed (also for each tenant
// of the initial catch-up).
func NewView(js jetstream.JetStream, logger *slog.Logger, onTenant func(Tenant)) *View {
	if logger == nil {
		logger = slog.Default()
	}
	return &View{js: js, log: logger, tenants: map[string]*Tenant{}, live: map[[32]byte]string{}, changed: make(chan struct{}), onTenant: onTenant}
}

// Start reads the newest snapshot of the fold (SnapshotBucket), then SVC_ADMIN from
// the sequence after it up to its last message, then keeps following it in the
// background until ctx ends. It returns once the catch-up is done. A snapshot that
// cannot be read is logged and the whole stream is read instead. A broker that fails
// afterwards (a node lost, no quorum for a while) is retried with backoff from the
// event after the last one applied, for as long as it takes, and logged and counted
// (svc_broker_retries_total{loop="svc.admin.>"}); errc is kept for callers but
// receives nothing from a broker failure.
func (v *View) Start(ctx context.Context, errc chan<- error) error {
	stream, err := v.js.Stream(ctx, pipeline.AdminStream)
	if err != nil {
		return fmt.Errorf("tenancy: stream %s: %w", pipeline.AdminStream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	target := info.State.LastSeq
	if err := v.restore(ctx, target); err != nil {
		v.log.Warn("admin snapshot not read; reading SVC_ADMIN from its start", "err", err)
	}
	v.announceRestored()
	it, err := v.messages(ctx, v.Seq()+1)
	if err != nil {
		return err
	}
	caught := make(chan error, 1)
	if target <= v.Seq() {
		caught <- nil
	}
	go v.follow(ctx, it, target, caught)
	select {
	case err := <-caught:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// announceRestored calls onTenant with every tenant a snapshot restored, as the
// replay of their events would have.
func (v *View) announceRestored() {
	if v.onTenant == nil || v.Seq() == 0 {
		return
	}
	for _, t := range v.Tenants() {
		v.onTenant(t)
	}
}

// messages opens an ordered consumer of every admin event from stream sequence from.
func (v *View) messages(ctx context.Context, from uint64) (jetstream.MessagesContext, error) {
	stream, err := v.js.Stream(ctx, pipeline.AdminStream)
	if err != nil {
		return nil, fmt.Errorf("tenancy: stream %s: %w", pipeline.AdminStream, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pipeline.AdminPrefix + ">"},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	return it, nil
}

// follow applies the admin events of it until ctx ends, reopening it after a broker
// failure; caught receives nil once the event at target is applied.
func (v *View) follow(ctx context.Context, it jetstream.MessagesContext, target uint64, caught chan<- error) {
	wait := 50 * time.Millisecond
	for {
		err := v.drain(ctx, it, target, caught)
		it.Stop()
		if ctx.Err() != nil {
			return
		}
		v.Telemetry.BrokerRetry(pipeline.AdminPrefix + ">")
		v.log.Warn("following the administrative events failed; retrying", "stream", pipeline.AdminStream, "err", err, "in", wait)
		for it = nil; it == nil; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Second)
			if it, err = v.messages(ctx, v.Seq()+1); err != nil {
				v.Telemetry.BrokerRetry(pipeline.AdminPrefix + ">")
				v.log.Warn("following the administrative events failed; retrying", "stream", pipeline.AdminStream, "err", err, "in", wait)
			}
		}
		wait = 50 * time.Millisecond
	}
}

// drain applies the events of it until the broker fails (that error) or ctx ends.
func (v *View) drain(ctx context.Context, it jetstream.MessagesContext, target uint64, caught chan<- error) error {
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		if md.Sequence.Stream <= target {
			v.mu.Lock()
			v.stats.Events++
			v.mu.Unlock()
		}
		ev, err := DecodeEvent(m.Data())
		if err != nil {
			v.log.Warn("admin event ignored", "seq", md.Sequence.Stream, "err", err)
			v.advance(md.Sequence.Stream)
		} else {
			v.Apply(md.Sequence.Stream, ev)
		}
		if md.Sequence.Stream == target {
			select {
			case caught <- nil:
			default:
			}
		}
		v.maybeSnapshot(ctx)
	}
}

func (v *View) advance(seq uint64) {
	v.mu.Lock()
	if seq > v.seq {
		v.seq = seq
	}
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// Apply folds one event at stream sequence seq; an event at or below the last
// applied sequence is ignored (idempotent by stream position).
func (v *View) Apply(seq uint64, e Event) {
	v.mu.Lock()
	if seq <= v.seq {
		v.mu.Unlock()
		return
	}
	t := v.tenants[e.TenantID]
	changed := true
	switch e.Action {
	case ActionTenantAdd:
		if t == nil {
			plan := e.Plan
			if plan == "" {
				plan = PlanFree
			}
			t = &Tenant{ID: e.TenantID, LogID: e.LogID, Plan: plan, CreatedAt: e.At}
			v.tenants[e.TenantID] = t
		}
	case ActionTenantDisable:
		if t != nil {
			t.Disabled = true
		}
	case ActionPlanSet:
		if t != nil && e.Plan != "" {
			t.Plan = e.Plan
		}
	case ActionLogPublic:
		if t != nil && e.Public != nil {
			t.Public = *e.Public
		}
	case ActionTokenAdd:
		if t != nil && e.TokenHash != "" {
			t.Tokens = append(t.Tokens, Token{Label: e.Label, Hash: e.TokenHash, TokenHash: Prefix(e.TokenHash), CreatedAt: e.At})
			if h, ok := parseHash(e.TokenHash); ok {
				v.live[h] = t.ID
			}
		}
	case ActionTokenRevoke:
		if t != nil && e.TokenHash != "" {
			for i := range t.Tokens {
				if t.Tokens[i].Hash == e.TokenHash && t.Tokens[i].RevokedAt == "" {
					t.Tokens[i].RevokedAt = e.At
				}
			}
			if h, ok := parseHash(e.TokenHash); ok {
				delete(v.live, h)
			}
		}
	default:
		changed = false
	}
	var snap Tenant
	if t != nil {
		t.Seq = seq // every event of a tenant is on its own subject
		snap = t.clone()
	}
	v.mu.Unlock()
	// The hook runs before the position moves, so whoever waits for this event
	// (Admin answering a creation) finds its effects in place (a tenant's log served).
	if changed && t != nil && v.onTenant != nil {
		v.onTenant(snap)
	}
	v.advance(seq)
}

func parseHash(s string) ([32]byte, bool) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return h, false
	}
	copy(h[:], b)
	return h, true
}

func (t *Tenant) clone() Tenant {
	c := *t
	c.Tokens = slices.Clone(t.Tokens)
	return c
}

// Seq is the stream sequence of the last applied event.
func (v *View) Seq() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.seq
}

// WaitFor returns once the view applied the event at stream sequence seq.
func (v *View) WaitFor(ctx context.Context, seq uint64) error {
	for {
		v.mu.RLock()
		done, ch := v.seq >= seq, v.changed
		v.mu.RUnlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("tenancy: waiting for admin event %d: %w", seq, ctx.Err())
		}
	}
}

// Tenant returns a copy of a tenant.
func (v *View) Tenant(id string) (Tenant, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.tenants[id]
	if !ok {
		return Tenant{}, false
	}
	return t.clone(), true
}

// Tenants returns copies of every tenant, sorted by id.
func (v *View) Tenants() []Tenant {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]Tenant, 0, len(v.tenants))
	for _, t := range v.tenants {
		out = append(out, t.clone())
	}
	slices.SortFunc(out, func(a, b Tenant) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Authorized reports whether token is a live token of tenant. Only the token's
// SHA-256 is looked up, so the time taken says nothing about how much of a token
// matched.
func (v *View) Authorized(tenant, token string) bool {
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	v.mu.RLock()
	defer v.mu.RUnlock()
	owner, ok := v.live[h]
	return ok && owner == tenant
}

// ErrNoTenant: the tenant does not exist.
var ErrNoTenant = errors.New("no such tenant")
