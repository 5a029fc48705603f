-- Two-factor sign-in (issue 30): a user's TOTP secret (base32; the store
-- keeps it as the authenticator does, to check codes: protect the
-- database and its backups), when it was enrolled and the last time step
-- a code was accepted at (a code of that step or an earlier one is
-- refused); the one-time recovery codes by their SHA-256 (used_at: spent);
-- whether an organization requires two-factor sign-in of every member.
CREATE TABLE user_totp (
    user_id     TEXT PRIMARY KEY REFERENCES users(id),
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    secret      TEXT NOT NULL,
    enrolled_at INTEGER NOT NULL,
    last_step   INTEGER NOT NULL
);

CREATE TABLE recovery_codes (
    user_id   TEXT NOT NULL REFERENCES users(id),
    code_hash TEXT NOT NULL,
    used_at   INTEGER,
    PRIMARY KEY (user_id, code_hash)
);

ALTER TABLE orgs ADD COLUMN require_2fa INTEGER NOT NULL DEFAULT 0;
