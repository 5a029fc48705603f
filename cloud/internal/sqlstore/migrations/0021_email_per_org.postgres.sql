-- Accounts (issue 30): a user's email is unique in their organization, no
-- longer across the relay (one person may belong to several
-- organizations; "Add member" tells an OWNER nothing about the others),
-- and must_change_password (the password was set by someone else and the
-- user must choose their own at their next sign-in).
ALTER TABLE users DROP CONSTRAINT users_email_key;
ALTER TABLE users ADD CONSTRAINT users_org_email_key UNIQUE (org_id, email);
ALTER TABLE users ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;
-- Sign-in by email: every organization's account with it.
CREATE INDEX users_email ON users(email, created_at, id);
