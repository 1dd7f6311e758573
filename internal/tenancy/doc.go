// Package tenancy holds the tenants, tokens and plans of the hosted log as
// administrative events on SVC_ADMIN (svc.admin.<tenant>), the source of truth, and the
// folded view of them every log server process keeps.
//
// # Events
//
// tenant.add, tenant.disable, token.add, token.revoke and plan.set are JSON [Event]s
// published by the admin API, `svc log-admin` (and later the portal and the billing
// webhook) through [Admin]. A tenant id is unique by a decision the broker makes once:
// tenant.add is published with Nats-Expected-Last-Subject-Sequence 0 on the tenant's
// admin subject, so of two writers racing to create the same tenant exactly one
// succeeds and the other gets [ErrTenantExists]. Tokens appear in events only as the
// SHA-256 of the token (hex), never the token; audit details name a token by the
// 12-hex prefix of its hash.
//
// # The view
//
// A [View] follows SVC_ADMIN from its first message and folds every event into
// tenants, their plans, disabled flags and tokens. Every process runs one, so a token
// revoked through any process is refused by every process as soon as its view applied
// the event (milliseconds on one broker), and [Admin] answers only after its own
// process's view applied the event it published, so a tenant can append as soon as its
// creation is answered.
//
// # Quotas
//
// [Quota] is the sequencer's admitter (internal/sequencer): it owns the count of a
// tenant's appends in the current calendar month (UTC) and refuses appends past the
// plan's allowance with pipeline.ErrQuota and a Retry-After reaching the start of
// the next month, and appends of a disabled tenant with pipeline.ErrDisabled.
package tenancy
