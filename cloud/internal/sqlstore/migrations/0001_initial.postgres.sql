-- The relay's schema on PostgreSQL, the same tables and columns as the SQLite
-- store's (its migrations 0001-0005 beside this file) so that `fleet-relay store copy` moves
-- rows one to one. Times are Unix milliseconds (bigint), UTC, as there.
-- metrics and events are partitioned by day on their time column; the store
-- creates partitions ahead and on demand, and retention drops whole ones.

CREATE TABLE orgs (
    id                      text PRIMARY KEY,
    name                    text NOT NULL,
    webhook_secret          text NOT NULL,
    alert_webhook_url       text NOT NULL DEFAULT '',
    previous_webhook_secret text NOT NULL DEFAULT '',
    previous_secret_until   bigint NOT NULL DEFAULT 0,
    created_at              bigint NOT NULL
);

CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES orgs(id),
    name       text NOT NULL,
    hash       bytea NOT NULL,
    scopes     text NOT NULL,           -- comma-separated
    expires_at bigint,                  -- NULL: never
    revoked_at bigint,
    created_at bigint NOT NULL
);
CREATE INDEX api_keys_org ON api_keys(org_id, created_at, id);

CREATE TABLE devices (
    id                    text PRIMARY KEY,
    org_id                text NOT NULL REFERENCES orgs(id),
    name                  text NOT NULL,
    serial_number         text NOT NULL,
    model                 text NOT NULL,
    location              text NOT NULL DEFAULT '',
    notes                 text,
    status                text NOT NULL DEFAULT 'PROVISIONING',
    firmware_version      text NOT NULL DEFAULT '',
    last_seen             bigint,
    ip_address            text NOT NULL DEFAULT '',
    agent_device_name     text NOT NULL DEFAULT '',
    agent_device_location text NOT NULL DEFAULT '',
    agent_timezone        text NOT NULL DEFAULT '',
    token_hash            bytea NOT NULL UNIQUE,   -- SHA-256 of the device token
    token_revoked_at      bigint,
    created_at            bigint NOT NULL,
    -- Agent link: the websocket session that owns the device (NULL: none);
    -- a write of another session is refused.
    agent_session         text,
    -- Unix ms after which the device counts as gone; any relay's sweep
    -- marks it OFFLINE. NULL: not connected.
    agent_deadline        bigint,
    agent_heartbeat_ms    bigint NOT NULL DEFAULT 30000,
    agent_last_seq        bigint NOT NULL DEFAULT 0,
    agent_version         text NOT NULL DEFAULT '',
    -- Presence: the relay process holding the socket of agent_session, and
    -- the session's epoch (raised by every connect, so a newer connection
    -- on any relay supersedes an older one).
    agent_relay           text,
    agent_epoch           bigint NOT NULL DEFAULT 0,
    UNIQUE (org_id, serial_number)
);
CREATE INDEX devices_org_created ON devices(org_id, created_at, id);
CREATE INDEX devices_org_status_created ON devices(org_id, status, created_at, id);
CREATE INDEX devices_agent_deadline ON devices(agent_deadline) WHERE agent_deadline IS NOT NULL;
CREATE INDEX devices_offline_last_seen ON devices(last_seen) WHERE status = 'OFFLINE';
CREATE INDEX devices_revoked_session ON devices(id) WHERE token_revoked_at IS NOT NULL AND agent_session IS NOT NULL;

CREATE TABLE serial_state (
    device_id       text PRIMARY KEY REFERENCES devices(id),
    enabled         boolean NOT NULL DEFAULT true,
    mode            text NOT NULL DEFAULT 'managed',
    webhook_url     text,
    webhook_enabled boolean NOT NULL DEFAULT false,
    desired_version bigint NOT NULL DEFAULT 0,  -- bumped by every PATCH /serial and PUT channel
    applied_version bigint NOT NULL DEFAULT 0,  -- the version the agent acknowledged
    telemetry_at    bigint                      -- time of the last reported signals
);

CREATE TABLE serial_channels (
    device_id           text NOT NULL REFERENCES devices(id),
    channel_id          text NOT NULL,
    config              text,                    -- desired config JSON; NULL: the catalog default
    available           boolean,                 -- as the agent reported; NULL: not reported yet
    live                text NOT NULL DEFAULT '',
    tx_on               boolean NOT NULL DEFAULT false,
    error               text NOT NULL DEFAULT '',
    passthrough_address text,
    PRIMARY KEY (device_id, channel_id)
);

-- One row per sample; (device_id, captured_at) makes a resend idempotent.
CREATE TABLE metrics (
    device_id     text NOT NULL,
    captured_at   bigint NOT NULL,
    cpu_pct       double precision NOT NULL,
    mem_pct       double precision NOT NULL,
    disk_used_pct double precision NOT NULL,
    temp_cpu      double precision NOT NULL,
    load_avg1     double precision NOT NULL,
    PRIMARY KEY (device_id, captured_at)
) PARTITION BY RANGE (captured_at);

-- An agent's event keeps the id and time it was made with, so (id,
-- created_at) recognises a resend (a partitioned table's unique keys
-- include its partition key).
CREATE TABLE events (
    id         text NOT NULL,
    org_id     text NOT NULL,
    device_id  text NOT NULL,
    type       text NOT NULL,
    severity   text NOT NULL,
    message    text NOT NULL,
    data       text NOT NULL DEFAULT '{}',
    created_at bigint NOT NULL,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX events_device_created ON events(device_id, created_at, id);
CREATE INDEX events_device_type_created ON events(device_id, type, created_at, id);
CREATE INDEX events_device_severity_created ON events(device_id, severity, created_at, id);

CREATE TABLE alert_rules (
    id              text PRIMARY KEY,
    org_id          text NOT NULL REFERENCES orgs(id),
    name            text NOT NULL,
    severity        text NOT NULL,
    metric          text NOT NULL DEFAULT '',
    threshold       double precision NOT NULL DEFAULT 0,
    clear_threshold double precision NOT NULL DEFAULT 0,
    consecutive     integer NOT NULL DEFAULT 1,
    enabled         boolean NOT NULL DEFAULT true,
    created_at      bigint NOT NULL,
    UNIQUE (org_id, name)
);

CREATE TABLE alerts (
    id              text PRIMARY KEY,
    org_id          text NOT NULL REFERENCES orgs(id),
    device_id       text NOT NULL REFERENCES devices(id),
    rule_id         text NOT NULL REFERENCES alert_rules(id),
    state           text NOT NULL,
    severity        text NOT NULL,
    message         text NOT NULL,
    payload         text NOT NULL DEFAULT '{}',
    acknowledged_at bigint,
    resolved_at     bigint,
    created_at      bigint NOT NULL
);
CREATE INDEX alerts_org_state_created ON alerts(org_id, state, created_at, id);
CREATE INDEX alerts_org_state_severity_created ON alerts(org_id, state, severity, created_at, id);
CREATE INDEX alerts_org_state_device_created ON alerts(org_id, state, device_id, created_at, id);
CREATE INDEX alerts_device_rule_created ON alerts(device_id, rule_id, created_at);
-- At most one open alert per device and rule.
CREATE UNIQUE INDEX alerts_one_open ON alerts(device_id, rule_id) WHERE state <> 'RESOLVED';

-- Webhook outbox: every delivery is written here before its first attempt.
-- seq gives the outbox (and per-device) order.
CREATE TABLE webhook_deliveries (
    seq             bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    id              text NOT NULL UNIQUE,
    org_id          text NOT NULL,
    device_id       text NOT NULL,
    event           text NOT NULL,
    url             text NOT NULL,
    body            bytea NOT NULL,
    state           text NOT NULL,            -- pending, delivered, failed, exhausted
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at bigint NOT NULL,
    last_status     integer,
    last_error      text NOT NULL DEFAULT '',
    redelivery_of   text,
    created_at      bigint NOT NULL,
    ended_at        bigint,
    -- Shared outbox: the relay that holds the delivery's attempt and until
    -- when (Unix ms); another relay takes it after the lease ends.
    lease_owner     text,
    lease_until     bigint
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries(seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_org ON webhook_deliveries(org_id, seq);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries(ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE webhook_attempts (
    delivery_id text NOT NULL,
    attempt     integer NOT NULL,
    at          bigint NOT NULL,
    status_code integer,
    error       text NOT NULL DEFAULT '',
    duration_ms bigint NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- Leases of cluster-wide jobs (the device_offline sweep, retention): one
-- relay holds each until lease_until (Unix ms).
CREATE TABLE leases (
    name        text PRIMARY KEY,
    owner       text NOT NULL,
    lease_until bigint NOT NULL
);
