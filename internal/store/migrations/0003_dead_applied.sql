-- Dead letters of the projections (messages they could not decode and moved past)
-- applied later by `svc exports dead replay`: one row each, so a letter replayed
-- twice (its removal from SVC_DEAD failed) is applied once.
CREATE TABLE dead_applied (
    handler    text   NOT NULL,
    stream_seq bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, stream_seq)
);
