-- The portal's own records (docs/design/portal.md). Unlike the projections these
-- are primary data: `svc replay db` does not rebuild them, so back them up with the
-- database. Passwords are stored only as scrypt hashes, sessions only as the
-- SHA-256 of their id.

-- One account per tenant: the email that registered it.
CREATE TABLE portal_accounts (
    email         text PRIMARY KEY CHECK (email = lower(email)),
    tenant_id     text NOT NULL UNIQUE,
    password_hash text NOT NULL,           -- scrypt$N$r$p$salt$key (base64)
    created_at    timestamptz NOT NULL DEFAULT now(),
    billing_customer text,                 -- the payment provider's customer id, once known
    billing_status   text                  -- e.g. active, after a completed checkout
);

-- Live sessions; logout deletes the row, so a copied cookie dies with it.
CREATE TABLE portal_sessions (
    id_hash    text PRIMARY KEY,           -- hex SHA-256 of the session id
    email      text NOT NULL REFERENCES portal_accounts (email) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX portal_sessions_email ON portal_sessions (email);

-- Billing webhook events already applied: a redelivery changes nothing.
CREATE TABLE portal_billing_events (
    event_id   text PRIMARY KEY,
    tenant_id  text NOT NULL,
    kind       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
