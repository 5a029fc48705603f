-- The audit log (issue 30): one append-only record per change made through
-- the API, the panel or the admin CLI, written in the change's
-- transaction. Nothing updates a row; the retention sweep deletes the old.
-- at_ms: Unix milliseconds; details: a JSON object without secrets.
CREATE TABLE audit_log (
    id          text PRIMARY KEY,
    org_id      text NOT NULL REFERENCES orgs(id),
    at_ms       bigint NOT NULL,
    actor_kind  text NOT NULL,   -- user, api_key, cli
    actor_id    text NOT NULL,
    actor_name  text NOT NULL,
    action      text NOT NULL,   -- key.created, channel.configured, ...
    target_kind text NOT NULL,
    target_id   text NOT NULL,
    ip          text NOT NULL,
    details     text NOT NULL
);
-- The panel's and the CLI's pages: an organization's records, newest first.
CREATE INDEX audit_log_org_at ON audit_log(org_id, at_ms, id);
-- The retention sweep.
CREATE INDEX audit_log_at ON audit_log(at_ms);
