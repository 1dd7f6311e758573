-- Each tenant's latest C2SP checkpoint (a signed note with the witnesses'
-- cosignatures), which GET /t/<tenant>/checkpoint serves from any process.
CREATE TABLE checkpoint_notes (
    tenant_id  text   PRIMARY KEY,
    tree_size  bigint NOT NULL,
    note       bytea  NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
