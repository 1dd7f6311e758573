package tenancy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
)

// Actions of administrative events (SPEC.md, "Administrative audit events").
const (
	ActionTenantAdd     = "tenant.add"
	ActionTenantDisable = "tenant.disable"
	ActionTokenAdd      = "token.add"
	ActionTokenRevoke   = "token.revoke"
	ActionPlanSet       = "plan.set"
)

// Plans (SPEC.md, "Limits").
const (
	PlanFree       = "free"
	PlanTeam       = "team"
	PlanEnterprise = "enterprise"
)

// Allowance is a plan's monthly allowance of appends; ok is false for a plan
// without one (enterprise) and for an unknown plan.
func Allowance(plan string) (n uint64, ok bool) {
	switch plan {
	case PlanFree:
		return 10000, true
	case PlanTeam:
		return 1000000, true
	}
	return 0, false
}

// ValidPlan reports whether plan is one of free, team, enterprise.
func ValidPlan(plan string) bool {
	return plan == PlanFree || plan == PlanTeam || plan == PlanEnterprise
}

// Event is one administrative event. Its first six fields are the audit entry of
// SPEC.md ({ id, at, actor, action, tenantId, detail }); the others carry what the
// fold needs and are empty where the action does not use them. It never holds a token.
type Event struct {
	ID       string `json:"id"`
	At       string `json:"at"`
	Actor    string `json:"actor"`
	Action   string `json:"action"`
	TenantID string `json:"tenantId"`
	Detail   string `json:"detail"`

	LogID     string `json:"logId,omitempty"`     // tenant.add
	Plan      string `json:"plan,omitempty"`      // tenant.add (initial plan), plan.set
	Label     string `json:"label,omitempty"`     // token.add
	TokenHash string `json:"tokenHash,omitempty"` // token.add, token.revoke: hex SHA-256 of the token
}

// MaxEventBytes caps one event on the stream.
const MaxEventBytes = 16 << 10

// DecodeEvent parses an event read from SVC_ADMIN and checks its fields.
func DecodeEvent(data []byte) (Event, error) {
	var e Event
	if len(data) > MaxEventBytes {
		return e, fmt.Errorf("admin event of %d bytes; the limit is %d", len(data), MaxEventBytes)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("admin event: %w", err)
	}
	if !client.ValidTenant(e.TenantID) {
		return e, fmt.Errorf("admin event %s: tenant id %q is not valid", e.ID, e.TenantID)
	}
	if e.TokenHash != "" {
		if b, err := hex.DecodeString(e.TokenHash); err != nil || len(b) != 32 {
			return e, fmt.Errorf("admin event %s: tokenHash is not 64 hex characters", e.ID)
		}
	}
	if e.Plan != "" && !ValidPlan(e.Plan) {
		return e, fmt.Errorf("admin event %s: unknown plan %q", e.ID, e.Plan)
	}
	return e, nil
}

func (e *Event) fill(now time.Time) {
	if e.ID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		e.ID = hex.EncodeToString(b[:])
	}
	if e.At == "" {
		e.At = receipt.FormatTime(now)
	}
}

// Prefix is how responses and audit details name a token: the first 12 hex
// characters of its hash.
func Prefix(tokenHash string) string {
	if len(tokenHash) < 12 {
		return tokenHash
	}
	return tokenHash[:12]
}
