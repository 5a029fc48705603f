-- The panel (issue 14): people who sign in, their sessions, and for each API
-- key who made it and when it was last used. Migration number range
-- 0060-0079: the panel.

CREATE TABLE users (
    id                  TEXT PRIMARY KEY,
    org_id              TEXT NOT NULL REFERENCES orgs(id),
    email               TEXT NOT NULL UNIQUE,   -- lower-cased
    role                TEXT NOT NULL,          -- OWNER, ADMIN, MEMBER, VIEWER
    password_hash       TEXT NOT NULL,          -- argon2id, PHC string
    disabled_at         INTEGER,                -- NULL: active
    password_changed_at INTEGER,                -- ends sessions signed in before it; NULL: never changed
    created_at          INTEGER NOT NULL
);
CREATE INDEX users_org ON users(org_id, created_at, id);

-- Panel sessions by the SHA-256 of their token (the cookie's value is never
-- stored); data is the session manager's encoding.
CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    data       BLOB NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_expiry ON sessions(expires_at);

ALTER TABLE api_keys ADD COLUMN created_by TEXT REFERENCES users(id); -- NULL: the admin CLI
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;                  -- to within a minute
