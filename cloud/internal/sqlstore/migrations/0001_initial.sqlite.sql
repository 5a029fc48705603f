-- Initial schema. Times are Unix milliseconds (INTEGER), UTC.
-- Migration number ranges: 0001-0019 public API and admin, 0020-0039 agent
-- link, 0040-0059 alerts and webhooks.

CREATE TABLE orgs (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    webhook_secret    TEXT NOT NULL,
    alert_webhook_url TEXT NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    name       TEXT NOT NULL,
    hash       BLOB NOT NULL,
    scopes     TEXT NOT NULL,           -- comma-separated
    expires_at INTEGER,                 -- NULL: never
    revoked_at INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX api_keys_org ON api_keys(org_id, created_at, id);

CREATE TABLE devices (
    id                    TEXT PRIMARY KEY,
    org_id                TEXT NOT NULL REFERENCES orgs(id),
    name                  TEXT NOT NULL,
    serial_number         TEXT NOT NULL,
    model                 TEXT NOT NULL,
    location              TEXT NOT NULL DEFAULT '',
    notes                 TEXT,
    status                TEXT NOT NULL DEFAULT 'PROVISIONING',
    firmware_version      TEXT NOT NULL DEFAULT '',
    last_seen             INTEGER,
    ip_address            TEXT NOT NULL DEFAULT '',
    agent_device_name     TEXT NOT NULL DEFAULT '',
    agent_device_location TEXT NOT NULL DEFAULT '',
    agent_timezone        TEXT NOT NULL DEFAULT '',
    token_hash            BLOB NOT NULL UNIQUE,   -- SHA-256 of the device token
    token_revoked_at      INTEGER,
    created_at            INTEGER NOT NULL,
    UNIQUE (org_id, serial_number)
);
CREATE INDEX devices_org_created ON devices(org_id, created_at, id);
CREATE INDEX devices_org_status_created ON devices(org_id, status, created_at, id);

-- Device-level serial state: desired settings and the last report.
CREATE TABLE serial_state (
    device_id       TEXT PRIMARY KEY REFERENCES devices(id),
    enabled         INTEGER NOT NULL DEFAULT 1,
    mode            TEXT NOT NULL DEFAULT 'managed',
    webhook_url     TEXT,
    webhook_enabled INTEGER NOT NULL DEFAULT 0,
    desired_version INTEGER NOT NULL DEFAULT 0,  -- bumped by every PATCH /serial and PUT channel
    applied_version INTEGER NOT NULL DEFAULT 0,  -- the version the agent acknowledged
    telemetry_at    INTEGER                      -- time of the last reported signals
);

-- Per-channel desired configuration and last reported state.
CREATE TABLE serial_channels (
    device_id           TEXT NOT NULL REFERENCES devices(id),
    channel_id          TEXT NOT NULL,
    config              TEXT,                    -- desired config JSON; NULL: the catalog default
    available           INTEGER,                 -- as the agent reported; NULL: not reported yet
    live                TEXT NOT NULL DEFAULT '',
    tx_on               INTEGER NOT NULL DEFAULT 0,
    error               TEXT NOT NULL DEFAULT '',
    passthrough_address TEXT,
    PRIMARY KEY (device_id, channel_id)
) WITHOUT ROWID;

-- One row per sample; (device_id, captured_at) makes a resend idempotent.
CREATE TABLE metrics (
    device_id     TEXT NOT NULL REFERENCES devices(id),
    captured_at   INTEGER NOT NULL,
    cpu_pct       REAL NOT NULL,
    mem_pct       REAL NOT NULL,
    disk_used_pct REAL NOT NULL,
    temp_cpu      REAL NOT NULL,
    load_avg1     REAL NOT NULL,
    PRIMARY KEY (device_id, captured_at)
) WITHOUT ROWID;

CREATE TABLE events (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    device_id  TEXT NOT NULL REFERENCES devices(id),
    type       TEXT NOT NULL,
    severity   TEXT NOT NULL,
    message    TEXT NOT NULL,
    data       TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL
);
CREATE INDEX events_device_created ON events(device_id, created_at, id);
CREATE INDEX events_device_type_created ON events(device_id, type, created_at, id);
CREATE INDEX events_device_severity_created ON events(device_id, severity, created_at, id);
CREATE INDEX events_created ON events(created_at);  -- retention sweeps

CREATE TABLE alert_rules (
    id              TEXT PRIMARY KEY,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    name            TEXT NOT NULL,       -- high_cpu, high_mem, disk_full, high_temp, device_offline, vpn_down
    severity        TEXT NOT NULL,
    metric          TEXT NOT NULL DEFAULT '',  -- cpuPct, memPct, diskUsedPct, tempCpu for threshold rules
    threshold       REAL NOT NULL DEFAULT 0,
    clear_threshold REAL NOT NULL DEFAULT 0,   -- hysteresis: released below this
    consecutive     INTEGER NOT NULL DEFAULT 1,
    enabled         INTEGER NOT NULL DEFAULT 1,
    created_at      INTEGER NOT NULL,
    UNIQUE (org_id, name)
);

CREATE TABLE alerts (
    id              TEXT PRIMARY KEY,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    device_id       TEXT NOT NULL REFERENCES devices(id),
    rule_id         TEXT NOT NULL REFERENCES alert_rules(id),
    state           TEXT NOT NULL,
    severity        TEXT NOT NULL,
    message         TEXT NOT NULL,
    payload         TEXT NOT NULL DEFAULT '{}',
    acknowledged_at INTEGER,
    resolved_at     INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE INDEX alerts_org_state_created ON alerts(org_id, state, created_at, id);
CREATE INDEX alerts_org_state_severity_created ON alerts(org_id, state, severity, created_at, id);
CREATE INDEX alerts_org_state_device_created ON alerts(org_id, state, device_id, created_at, id);
-- At most one open alert per device and rule.
CREATE UNIQUE INDEX alerts_one_open ON alerts(device_id, rule_id) WHERE state <> 'RESOLVED';
