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
// A [View] folds every event of SVC_ADMIN into tenants, their plans, disabled flags
// and tokens. It starts from the newest snapshot of the fold in the object store
// [SnapshotBucket] (gzip'd JSON with the stream sequence it reached), reads only the
// events after it, then follows the stream. The log server's view writes a snapshot
// every [SnapshotEvery] events (WriteSnapshots); log-admin's and the portal's read it.
// Two processes writing at once may leave the older of their snapshots: a start then
// reads more events, never a wrong fold. A snapshot ahead of the stream (a stream
// made anew) or unreadable is ignored and the whole stream read. Every process runs one, so a token
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
