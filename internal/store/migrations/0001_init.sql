-- Every table but checkpoints is a projection of a stream, keyed by its stream
-- position, so `svc replay db` rebuilds it into an empty database.

-- How far each projection has applied its stream.
CREATE TABLE projection_positions (
    name       text PRIMARY KEY,         -- 'admin' (SVC_ADMIN) or 'leaves' (SVC_LEAVES)
    stream_seq bigint NOT NULL
);

-- Projection of SVC_ADMIN.
CREATE TABLE tenants (
    id         text PRIMARY KEY,
    log_id     text NOT NULL DEFAULT '',
    plan       text NOT NULL CHECK (plan IN ('free', 'team', 'enterprise')),
    disabled   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    admin_seq  bigint NOT NULL           -- stream position of the last event applied to the row
);

-- Projection of SVC_ADMIN. Only the SHA-256 of a token is ever stored.
CREATE TABLE tokens (
    hash       text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
    tenant_id  text NOT NULL REFERENCES tenants (id),
    label      text NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    admin_seq  bigint NOT NULL
);
CREATE INDEX tokens_tenant ON tokens (tenant_id);

-- Projection of SVC_ADMIN: the audit trail, one row per event.
CREATE TABLE audit (
    stream_seq bigint PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    action     text NOT NULL,
    tenant_id  text NOT NULL,
    detail     text NOT NULL
);
CREATE INDEX audit_tenant ON audit (tenant_id, stream_seq DESC);

-- Projection of SVC_LEAVES: appends per tenant and calendar month (UTC, by the time
-- the broker stored the batch).
CREATE TABLE usage (
    tenant_id text NOT NULL,
    month     text NOT NULL CHECK (month ~ '^[0-9]{4}-[0-9]{2}$'),
    appends   bigint NOT NULL,
    PRIMARY KEY (tenant_id, month)
);

-- Projection of SVC_LEAVES: each tenant's log size.
CREATE TABLE log_sizes (
    tenant_id    text PRIMARY KEY,
    total_leaves bigint NOT NULL
);

-- Checkpoints: signatures made at the time (not a projection; never replayed). A size
-- is re-signed only with its root unchanged (see Store.PutCheckpoint).
CREATE TABLE checkpoints (
    tenant_id text NOT NULL,
    tree_size bigint NOT NULL,
    root_hash text NOT NULL CHECK (root_hash ~ '^[0-9a-f]{64}$'),
    signed_at timestamptz NOT NULL,
    envelope  jsonb NOT NULL,
    PRIMARY KEY (tenant_id, tree_size)
);
