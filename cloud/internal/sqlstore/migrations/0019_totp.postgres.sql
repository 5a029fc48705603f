-- Two-factor sign-in (issue 30): a user's TOTP secret (base32; the store
-- keeps it as the authenticator does, to check codes: protect the
-- database and its backups), when it was enrolled and the last time step
-- a code was accepted at (a code of that step or an earlier one is
-- refused); the one-time recovery codes by their SHA-256 (used_at: spent);
-- whether an organization requires two-factor sign-in of every member.
CREATE TABLE user_totp (
    user_id     text PRIMARY KEY REFERENCES users(id),
    org_id      text NOT NULL REFERENCES orgs(id),
    secret      text NOT NULL,
    enrolled_at bigint NOT NULL,
    last_step   bigint NOT NULL
);

CREATE TABLE recovery_codes (
    user_id   text NOT NULL REFERENCES users(id),
    code_hash text NOT NULL,
    used_at   bigint,
    PRIMARY KEY (user_id, code_hash)
);

ALTER TABLE orgs ADD COLUMN require_2fa boolean NOT NULL DEFAULT false;
