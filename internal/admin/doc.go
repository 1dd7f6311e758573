// Package admin serves the operator's routes of the database-backed log server:
// the admin API under /admin/* (SPEC.md, "Log server: admin API") and the operator
// page GET /admin, server-rendered from embedded templates and usable without
// JavaScript.
//
// Every route needs the admin token, as a bearer or as the HTTP Basic password with
// any user name, checked (by its SHA-256, in constant time) before a body is read.
// After MaxFailures wrong attempts from one address within a minute, that address is
// refused with 429 for a minute. TrustProxy says which X-Forwarded-For entry is the
// address behind a proxy (httplimits.Proxy); by default the peer, since a client can
// forge the header.
//
// Writes become administrative events (internal/tenancy) whose actor is "bearer" for
// an API client and "<name at the prompt> (<address>)" for the page and other Basic
// clients. Reads of tenants and tokens come from the process's folded view (current as
// soon as a write is answered); usage and the audit trail come from PostgreSQL
// (internal/store), projections that follow the streams within moments.
//
// # JSON bodies SPEC.md leaves open
//
//	GET  /admin/tenants                       {"tenants": [Tenant]}
//	POST /admin/tenants {id, logId?}          201 {"tenant": Tenant}; 409 when the id exists
//	POST /admin/tenants/<id>/disable          {"tenant": Tenant}
//	POST /admin/tenants/<id>/plan {plan}      {"tenant": Tenant}
//	GET  /admin/tenants/<id>/tokens           {"tokens": [{label, tokenHash, createdAt, revokedAt?}]}
//	GET  /admin/usage?month=YYYY-MM           {"month", "tenants": [{tenant, plan, appends, quota, totalLeaves, liveTokens, disabled}]}
//	GET  /admin/audit?tenant=&limit=          {"entries": [audit entry]}, newest first
//	GET  /admin/info                          {"publicUrl", "checkpointsUrl", "keyid", "tenants", "adminSeq", "database"}
//
// Tenant is {id, logId, plan, disabled, createdAt, liveTokens, quota} (quota null on
// enterprise). Errors are {"error": "..."}: 400 bad body or value, 401 unauthorized, 404
// no such tenant or token, 409 tenant exists, 413 body too large, 429 throttled, 503
// broker or database unavailable.
//
// /admin/usage.csv (for invoicing) has the header line
//
//	month,tenant,log_id,plan,appends,quota,total_leaves,live_tokens,disabled
//
// with one line per tenant; quota is empty for enterprise (no allowance).
package admin
