package client

// AuditEntry is SPEC.md's audit entry: one administrative action on a tenant (its
// creation, disabling, a plan change, a token added or revoked), as the audit routes
// (/t/<tenant>/audit, /admin/audit), the portal's overview and a tenant export show
// it. It never contains a token: Detail names a token by the 12-hex prefix of its
// hash.
type AuditEntry struct {
	ID       string `json:"id"`       // random hex, unique per entry
	At       string `json:"at"`       // RFC 3339 UTC, when the action was taken
	Actor    string `json:"actor"`    // who took it: an operator, "billing:<event>", …
	Action   string `json:"action"`   // tenant.add, tenant.disable, token.add, token.revoke, plan.set
	TenantID string `json:"tenantId"` // the tenant acted on
	Detail   string `json:"detail"`   // what changed, in words
}
