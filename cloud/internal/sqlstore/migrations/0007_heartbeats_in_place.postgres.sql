-- Heartbeats update devices in place (HOT). A heartbeat rewrites last_seen,
-- and PostgreSQL updates a row in place only when no indexed column changes
-- (predicates of partial indexes included) and its page has room. The
-- offline-alert scan's index was on last_seen, which made every heartbeat a
-- new row version with an entry in each of the table's eight indexes; the
-- scan reads every OFFLINE device anyway (its time test is no range on
-- last_seen), so the index holds the ids of OFFLINE devices instead. The
-- tables a heartbeat writes keep a quarter of each page free for the new
-- versions of its rows (pages written from now on).
DROP INDEX devices_offline_last_seen;
CREATE INDEX devices_offline ON devices(id) WHERE status = 'OFFLINE';
ALTER TABLE devices SET (fillfactor = 75);
ALTER TABLE serial_state SET (fillfactor = 75);
ALTER TABLE serial_channels SET (fillfactor = 75);
