// Package store is the PostgreSQL side of the hosted log (pgx/v5, one pool): the
// projections of SVC_ADMIN (tenants, tokens, the audit trail) and of SVC_LEAVES
// (monthly usage, log sizes), each keyed by its stream position so that applying an
// event twice changes nothing and `svc replay db` rebuilds them into an empty
// database, and the checkpoints of the database store.
//
// PostgreSQL stays off the append path: the sequencer answers an append once the broker
// holds it, and these projections follow the streams behind it. The schema lives in
// migrations/*.sql, embedded, and [Open] applies what a database lacks, under an
// advisory lock so that two processes starting at once do not race.
package store
