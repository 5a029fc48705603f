-- Webhook outbox: every delivery is written here before its first attempt;
-- attempts are recorded with the delivery's new state in the same
-- transaction. seq gives the outbox (and per-device) order.
CREATE TABLE webhook_deliveries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL,
    device_id       TEXT NOT NULL,
    event           TEXT NOT NULL,            -- serial.signal, alert.opened, alert.acknowledged, alert.resolved
    url             TEXT NOT NULL,
    body            BLOB NOT NULL,
    state           TEXT NOT NULL,            -- pending, delivered, failed, exhausted
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_status     INTEGER,                  -- HTTP status of the last attempt; NULL: no response
    last_error      TEXT NOT NULL DEFAULT '',
    redelivery_of   TEXT,                     -- id of the delivery this one repeats (webhook redeliver)
    created_at      INTEGER NOT NULL,
    ended_at        INTEGER                   -- set with a final state
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries(seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_org ON webhook_deliveries(org_id, seq);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries(ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt     INTEGER NOT NULL,             -- 1-based
    at          INTEGER NOT NULL,
    status_code INTEGER,                      -- NULL: no response (timeout, connection error)
    error       TEXT NOT NULL DEFAULT '',
    duration_ms INTEGER NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;
