package tenancy

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"svc.dev/svc/client"
)

// Actions of administrative events (SPEC.md, "Administrative audit events").
const (
	ActionTenantAdd     = "tenant.add"
	ActionTenantDisable = "tenant.disable"
	ActionTokenAdd      = "token.add"
	ActionTokenRevoke   = "token.revoke"
	ActionPlanSet       = "plan.set"
	// ActionLogPublic opts a tenant's log public, or back private (Event.Public): its
	// C2SP entry bundles are then served without a token. Checkpoints and hash tiles
	// are public either way. Independent of the plan.
	ActionLogPublic = "log.public"
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

// Event is one administrative event: the audit entry of SPEC.md, and what the fold
// needs besides, empty where the action does not use it. It never holds a token.
type Event struct {
	client.AuditEntry

	LogID     string `json:"logId,omitempty"`     // tenant.add
	Plan      string `json:"plan,omitempty"`      // tenant.add (initial plan), plan.set
	Label     string `json:"label,omitempty"`     // token.add
	TokenHash string `json:"tokenHash,omitempty"` // token.add, token.revoke: hex SHA-256 of the token
	Public    *bool  `json:"public,omitempty"`    // log.public
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

// Prefix is how responses and audit details name a token: the first 12 hex
// characters of its hash.
func Prefix(tokenHash string) string {
	if len(tokenHash) < 12 {
		return tokenHash
	}
	return tokenHash[:12]
}
