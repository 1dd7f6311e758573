// Package portal is the self-serve front of the hosted log (SPEC.md, "Portal"):
// registration, log in and out, API keys, a dashboard's overview and billing, as a
// JSON API under /api/, the billing webhook at /stripe/webhook, /health, and the
// browser front of package portal/web at the site root.
//
// Tenants, tokens and plans change only through the administrative events of
// internal/tenancy (the same Admin the admin API uses; audit actor
// "portal:<email>", or "billing:<event id>" for the webhook). Accounts, sessions
// and applied billing events are rows of the log's PostgreSQL database
// (internal/store migration 0002). The design record is docs/design/portal.md.
package portal
