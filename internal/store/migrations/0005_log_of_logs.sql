-- The log of logs (docs/design/c2sp.md): leaf idx is a tenant's signed checkpoint
-- note. Leaves are written by the elected runner before any witness sees a checkpoint
-- over them; the primary key fences a runner that lost its lease.
CREATE TABLE log_of_logs (
    idx       bigint PRIMARY KEY,
    tenant_id text   NOT NULL,
    note      bytea  NOT NULL
);

-- The log of logs' latest checkpoint, with the witnesses' cosignatures (one row).
CREATE TABLE log_of_logs_checkpoint (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    tree_size bigint  NOT NULL,
    note      bytea   NOT NULL
);
