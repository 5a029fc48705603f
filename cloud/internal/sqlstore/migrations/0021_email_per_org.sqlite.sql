-- Accounts (issue 30): a user's email is unique in their organization, no
-- longer across the relay (one person may belong to several
-- organizations; "Add member" tells an OWNER nothing about the others),
-- and must_change_password (1: the password was set by someone else and
-- the user must choose their own at their next sign-in). SQLite cannot drop
-- a column's UNIQUE, so the table is rebuilt with every row, then its
-- indexes; the relay runs migrations with foreign keys off and checks them
-- before each step commits (api_keys.created_by names users).
CREATE TABLE users_new (
    id                   text PRIMARY KEY,
    org_id               text NOT NULL REFERENCES orgs(id),
    email                text NOT NULL,          -- lower-cased
    role                 text NOT NULL,          -- OWNER, ADMIN, MEMBER, VIEWER
    password_hash        text NOT NULL,          -- argon2id, PHC string
    disabled_at          bigint,                 -- NULL: active
    password_changed_at  bigint,                 -- ends sessions signed in before it; NULL: never changed
    created_at           bigint NOT NULL,
    must_change_password integer NOT NULL DEFAULT 0,
    UNIQUE (org_id, email)
);
INSERT INTO users_new (id, org_id, email, role, password_hash, disabled_at, password_changed_at, created_at)
    SELECT id, org_id, email, role, password_hash, disabled_at, password_changed_at, created_at FROM users;
DROP TABLE users;
ALTER TABLE users_new RENAME TO users;
CREATE INDEX users_org ON users(org_id, created_at, id);
-- Sign-in by email: every organization's account with it.
CREATE INDEX users_email ON users(email, created_at, id);
