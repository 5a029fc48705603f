-- Point history (issue 26, DESIGN.md "Points"). A series is one point of
-- one device, numbered by a small integer. Samples arrive in the head, one
-- row per stored record of a device (its samples as a blob, appended by
-- rowid), written in the transaction that stores the record (a resend
-- stores nothing); the compactor folds the head's older rows into each
-- series' chunks (Prometheus' XOR encoding, about a byte or two a sample)
-- and deletes them in the same transaction. compacted_to is the
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

-- Writers check new samples against compacted_to by this index.
CREATE INDEX point_series_compacted ON point_series(device_id, compacted_to);

-- samples: per sample its series id, its time (the agent's time of the
-- read, Unix ms) after at_min, and its value or a bad reading's cause
-- (sqlstore.EncodeHead).
CREATE TABLE point_head (
    id        INTEGER PRIMARY KEY,
    device_id TEXT NOT NULL,
    at_min    INTEGER NOT NULL,
    at_max    INTEGER NOT NULL,
    samples   BLOB NOT NULL
);
-- Readers find a device's recent rows by the newest time they hold.
CREATE INDEX point_head_device ON point_head(device_id, at_max);
-- The compactor and retention find the rows older than their cut.
CREATE INDEX point_head_at ON point_head(at_min, device_id);

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
