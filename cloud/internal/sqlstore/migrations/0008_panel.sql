-- The panel (issue 14): people who sign in, their sessions, and for each API
-- key who made it and when it was last used. One file for both stores: its
-- types read alike in both (SQLite stores the bytea column's blobs as they
-- are).

CREATE TABLE users (
    id                  text PRIMARY KEY,
    org_id              text NOT NULL REFERENCES orgs(id),
    email               text NOT NULL UNIQUE,   -- lower-cased
    role                text NOT NULL,          -- OWNER, ADMIN, MEMBER, VIEWER
    password_hash       text NOT NULL,          -- argon2id, PHC string
    disabled_at         bigint,                 -- NULL: active
    password_changed_at bigint,                 -- ends sessions signed in before it; NULL: never changed
    created_at          bigint NOT NULL
);
CREATE INDEX users_org ON users(org_id, created_at, id);

-- Panel sessions by the SHA-256 of their token (the cookie's value is never
-- stored); data is the session manager's encoding.
CREATE TABLE sessions (
    token_hash text PRIMARY KEY,
    data       bytea NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX sessions_expiry ON sessions(expires_at);

ALTER TABLE api_keys ADD COLUMN created_by text REFERENCES users(id); -- NULL: the admin CLI
ALTER TABLE api_keys ADD COLUMN last_used_at bigint;                  -- to within a minute
