-- Point history (issue 26, DESIGN.md "Points"). A series is one point of
-- one device, numbered by a small integer. Its samples arrive in the head,
-- one row each, written in the transaction that stores their record (so a
-- resend is ignored as other records are); the compactor folds the head's
-- older samples into chunks (Prometheus' XOR encoding, about a byte or two
-- a sample) and deletes them in the same transaction. compacted_to is the
-- newest time a series' chunks hold: a sample at or before it is a resend
-- of one already compacted (or arrived too late) and is not stored again,
-- and readers take the head only after it.

CREATE TABLE point_series (
    id           INTEGER PRIMARY KEY,
    device_id    TEXT NOT NULL REFERENCES devices(id),
    point        TEXT NOT NULL,              -- "<channelId>.<name>"
    compacted_to INTEGER NOT NULL DEFAULT -9223372036854775808,
    UNIQUE (device_id, point)
);

CREATE TABLE point_head (
    series_id INTEGER NOT NULL,
    at        INTEGER NOT NULL,              -- the agent's time of the read, Unix ms
    value     REAL,                          -- NULL: a bad reading
    error     TEXT,                          -- a bad reading's cause
    PRIMARY KEY (series_id, at)
) WITHOUT ROWID;

-- A chunk holds count samples in [start_at, end_at]; a series' chunks never
-- overlap. A bad reading is a NaN in data; last_error is the cause of the
-- chunk's last sample when it is bad.
CREATE TABLE point_chunks (
    series_id  INTEGER NOT NULL,
    start_at   INTEGER NOT NULL,
    end_at     INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    last_error TEXT,
    data       BLOB NOT NULL,
    PRIMARY KEY (series_id, end_at)
);

-- Retention deletes the chunks that ended before its cut, and trims those
-- it falls in (they end less than a chunk's span after it).
CREATE INDEX point_chunks_end ON point_chunks(end_at);
