package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/pipeline"
)

// Errors of administrative operations; match with errors.Is.
var (
	ErrTenantExists = errors.New("tenant exists")
	ErrNoToken      = errors.New("no such live token")
	ErrInvalid      = errors.New("invalid administrative request")
	// ErrTooManyTokens: the tenant has MaxLiveTokens live tokens; one must be
	// revoked before another is made.
	ErrTooManyTokens = errors.New("too many live tokens")
	// errRace: another event of the tenant was recorded after the one the check
	// read (Nats-Expected-Last-Subject-Sequence refused); check again.
	errRace = errors.New("the tenant changed meanwhile")
)

// MaxLabel caps a token's label.
const MaxLabel = 200

// MaxLiveTokens caps a tenant's live (unrevoked) tokens. Each token is an
// administrative event every process folds and the operator page and the portal
// list; a tenant needs a handful (one per agent host or CI system).
const MaxLiveTokens = 25

// Admin publishes administrative events and answers once its own process's view
// applied them. Construct with the broker and the process's View.
type Admin struct {
	JS   jetstream.JetStream
	View *View
	Now  func() time.Time // default time.Now
}

func (a *Admin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// publish records e on its tenant's subject (with expectLast, when not nil, as
// Nats-Expected-Last-Subject-Sequence) and waits until the view applied it.
func (a *Admin) publish(ctx context.Context, e *Event, expectLast *uint64) error {
	m, err := pipeline.AdminMsg(&e.AuditEntry, e, a.now())
	if err != nil {
		return err
	}
	if expectLast != nil {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*expectLast, 10))
	}
	ack, err := a.JS.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		if *expectLast != 0 {
			return fmt.Errorf("%w: %s", errRace, e.TenantID)
		}
		return fmt.Errorf("%w: %s", ErrTenantExists, e.TenantID)
	}
	if err != nil {
		return fmt.Errorf("recording %s for %s: %w", e.Action, e.TenantID, err)
	}
	return a.View.WaitFor(ctx, ack.Sequence)
}

// existing returns tenant id as the view holds it after catching up with the
// tenant's newest event (another process may have just created or changed it).
func (a *Admin) existing(ctx context.Context, id string) (Tenant, error) {
	if client.ValidTenant(id) {
		if err := a.View.CatchUp(ctx, a.JS, id); err != nil {
			return Tenant{}, err
		}
	}
	t, ok := a.View.Tenant(id)
	if !ok {
		return t, fmt.Errorf("%w: %q", ErrNoTenant, id)
	}
	return t, nil
}

// AddTenant creates a tenant on the free plan. The broker decides uniqueness: of two
// concurrent creations of one id, one gets ErrTenantExists.
func (a *Admin) AddTenant(ctx context.Context, actor, id, logID string) (Tenant, error) {
	if err := CheckTenantID(id); err != nil {
		return Tenant{}, err
	}
	if err := client.CheckLogID(logID); err != nil {
		return Tenant{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	detail := "log id " + orNone(logID) + ", plan free"
	var zero uint64
	if err := a.publish(ctx, &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionTenantAdd, TenantID: id, Detail: detail}, LogID: logID, Plan: PlanFree}, &zero); err != nil {
		return Tenant{}, err
	}
	return a.existing(ctx, id)
}

// DisableTenant disables a tenant: its appends are refused from then on.
func (a *Admin) DisableTenant(ctx context.Context, actor, id string) (Tenant, error) {
	if _, err := a.existing(ctx, id); err != nil {
		return Tenant{}, err
	}
	if err := a.publish(ctx, &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionTenantDisable, TenantID: id, Detail: "tenant disabled"}}, nil); err != nil {
		return Tenant{}, err
	}
	return a.existing(ctx, id)
}

// SetPlan moves a tenant to plan (free, team or enterprise).
func (a *Admin) SetPlan(ctx context.Context, actor, id, plan string) (Tenant, error) {
	if !ValidPlan(plan) {
		return Tenant{}, fmt.Errorf("%w: plan %q: want free, team or enterprise", ErrInvalid, plan)
	}
	t, err := a.existing(ctx, id)
	if err != nil {
		return Tenant{}, err
	}
	if err := a.publish(ctx, &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionPlanSet, TenantID: id, Detail: "plan " + t.Plan + " -> " + plan}, Plan: plan}, nil); err != nil {
		return Tenant{}, err
	}
	return a.existing(ctx, id)
}

// SetPublic opts a tenant's log public (its entry bundles served without a token)
// or back private; an audited event like every other.
func (a *Admin) SetPublic(ctx context.Context, actor, id string, public bool) (Tenant, error) {
	if _, err := a.existing(ctx, id); err != nil {
		return Tenant{}, err
	}
	detail := "log made private: entry bundles need a token"
	if public {
		detail = "log made public: entry bundles need no token"
	}
	if err := a.publish(ctx, &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionLogPublic, TenantID: id, Detail: detail}, Public: &public}, nil); err != nil {
		return Tenant{}, err
	}
	return a.existing(ctx, id)
}

// AddToken makes a new token for a tenant: 64 hex characters, returned once; only
// its hash is recorded. A tenant with MaxLiveTokens live tokens gets
// ErrTooManyTokens. The count holds under concurrency, across processes: the event
// is recorded only if the tenant's last event is still the one the count read
// (Nats-Expected-Last-Subject-Sequence), else the count is made again.
func (a *Admin) AddToken(ctx context.Context, actor, id, label string) (string, Token, error) {
	if len(label) > MaxLabel {
		return "", Token{}, fmt.Errorf("%w: label of %d characters; at most %d", ErrInvalid, len(label), MaxLabel)
	}
	// Concurrent additions to one tenant each win one round in turn: the losers try
	// again after a short random pause (at most 64 times, about a second in all).
	for i := range 64 {
		token, tok, err := a.addToken(ctx, actor, id, label)
		if !errors.Is(err, errRace) {
			return token, tok, err
		}
		select {
		case <-ctx.Done():
			return "", Token{}, ctx.Err()
		case <-time.After(time.Duration(mrand.Int64N(int64(min(i+1, 20)) * int64(time.Millisecond)))):
		}
	}
	return "", Token{}, fmt.Errorf("tenant %s changes too fast to add a token; try again", id)
}

func (a *Admin) addToken(ctx context.Context, actor, id, label string) (string, Token, error) {
	t, err := a.existing(ctx, id)
	if err != nil {
		return "", Token{}, err
	}
	if n := t.LiveTokens(); n >= MaxLiveTokens {
		return "", Token{}, fmt.Errorf("%w: tenant %s has %d live tokens, the most allowed (%d); revoke one it no longer uses first", ErrTooManyTokens, id, n, MaxLiveTokens)
	}
	last := t.Seq
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", Token{}, err
	}
	token := hex.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(h[:])
	e := &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionTokenAdd, TenantID: id, Detail: "token " + Prefix(hash) + " added, label " + strconv.Quote(label)}, Label: label, TokenHash: hash}
	if err := a.publish(ctx, e, &last); err != nil {
		return "", Token{}, err
	}
	return token, Token{Label: label, Hash: hash, TokenHash: Prefix(hash), CreatedAt: e.At}, nil
}

// RevokeToken revokes the live token of tenant id whose hash starts with prefix
// (at least 6 hex characters; the 12 the responses show are enough). It returns the
// number revoked: 1.
func (a *Admin) RevokeToken(ctx context.Context, actor, id, prefix string) (int, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < 6 || len(prefix) > 64 {
		return 0, fmt.Errorf("%w: hash prefix %q: give 6 to 64 hex characters (the tokenHash shown by token list)", ErrInvalid, prefix)
	}
	if _, err := hex.DecodeString(prefix[:len(prefix)&^1]); err != nil {
		return 0, fmt.Errorf("%w: hash prefix %q is not hex", ErrInvalid, prefix)
	}
	t, err := a.existing(ctx, id)
	if err != nil {
		return 0, err
	}
	var match []Token
	for _, k := range t.Tokens {
		if k.RevokedAt == "" && strings.HasPrefix(k.Hash, prefix) {
			match = append(match, k)
		}
	}
	switch len(match) {
	case 0:
		return 0, fmt.Errorf("%w: tenant %s has no live token whose hash starts with %s", ErrNoToken, id, prefix)
	case 1:
	default:
		return 0, fmt.Errorf("%w: %d live tokens of %s start with %s; give more of the hash", ErrInvalid, len(match), id, prefix)
	}
	e := &Event{AuditEntry: client.AuditEntry{Actor: actor, Action: ActionTokenRevoke, TenantID: id, Detail: "token " + Prefix(match[0].Hash) + " revoked"}, TokenHash: match[0].Hash}
	if err := a.publish(ctx, e, nil); err != nil {
		return 0, err
	}
	return 1, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
