-- Alert rules people shape (issue 27): each rule's scope, condition and
-- notification channels as JSON (the API's shapes, shared/resource), its
-- repeat interval, when it last changed and when it was deleted (a deleted
-- rule keeps its row for its alerts, renamed "<name> (deleted <id>)" to
-- free the name). The six fixed rules become ordinary rules with their ids
-- kept: a threshold rule holds for (consecutive - 1) samples of the agent's
-- default metrics interval (5 min). Every organization gains device_error.
-- The fixed rules' columns (metric, threshold, clear_threshold,
-- consecutive) are no longer read.
ALTER TABLE alert_rules ADD COLUMN scope text NOT NULL DEFAULT '{}';
ALTER TABLE alert_rules ADD COLUMN cond text NOT NULL DEFAULT '{}';
ALTER TABLE alert_rules ADD COLUMN notify text NOT NULL DEFAULT '[]';
ALTER TABLE alert_rules ADD COLUMN repeat_every_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE alert_rules ADD COLUMN updated_at bigint NOT NULL DEFAULT 0;
ALTER TABLE alert_rules ADD COLUMN deleted_at bigint;

UPDATE alert_rules SET updated_at = created_at, cond = (CASE
    WHEN name = 'device_offline' THEN json_build_object('kind', 'offline', 'after', '30s')
    WHEN name = 'vpn_down' THEN json_build_object('kind', 'event', 'type', 'alert.vpn_down', 'resolveOn', 'vpn.up')
    WHEN metric <> '' THEN json_build_object('kind', 'threshold', 'source', 'metric.' || metric, 'op', '>=',
        'value', threshold, 'clear', LEAST(clear_threshold, threshold),
        'for', ((LEAST(GREATEST(consecutive, 1), 289) - 1) * 300) || 's')
    ELSE json_build_object('kind', 'event', 'type', 'alert.' || name)
END)::text;

INSERT INTO alert_rules (id, org_id, name, severity, enabled, scope, cond, notify, repeat_every_ms, created_at, updated_at)
SELECT 'r' || substr(md5(random()::text || o.id), 1, 22), o.id, 'device_error', 'ERROR', true, '{}',
       json_build_object('kind', 'status', 'status', 'ERROR', 'for', '1m')::text, '[]', 0, o.created_at, o.created_at
FROM orgs o
ON CONFLICT DO NOTHING;

CREATE INDEX alert_rules_org_live ON alert_rules(org_id, created_at, id) WHERE deleted_at IS NULL;

-- Where alerts go besides the organization's alert webhook.
CREATE TABLE notification_channels (
    id           text PRIMARY KEY,
    org_id       text NOT NULL REFERENCES orgs(id),
    name         text NOT NULL,
    kind         text NOT NULL,   -- email, slack, webhook
    target       text NOT NULL,   -- addresses (email) or an https URL
    min_severity text NOT NULL,
    created_at   bigint NOT NULL
);
CREATE INDEX notification_channels_org ON notification_channels(org_id, created_at, id);

-- Maintenance windows: alerts of the devices in scope open but notify
-- nobody in [from_at, to_at). DELETE /silences/{id} sets ended_at (and
-- to_at to then): an ended silence is no longer listed.
CREATE TABLE silences (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES orgs(id),
    scope      text NOT NULL DEFAULT '{}',
    from_at    bigint NOT NULL,
    to_at      bigint NOT NULL,
    comment    text NOT NULL DEFAULT '',
    created_by text NOT NULL DEFAULT '',
    created_at bigint NOT NULL,
    ended_at   bigint
);
CREATE INDEX silences_org ON silences(org_id, created_at, id);
CREATE INDEX silences_org_active ON silences(org_id, created_at, id) WHERE ended_at IS NULL;
