-- Alert rules (issue 27): each device's tags (a JSON array of strings,
-- sorted, that rule and silence scopes match), when it entered its status
-- (status_since: status rules wait `for` from it), and when it last
-- reported REBOOTING or UPDATING (planned_at: offline rules hold for
-- cloud.PlannedWorkHold after it). Unix milliseconds. Status rules read the
-- devices in a watched status by id through devices_status_watch; a
-- heartbeat rewrites none of these columns, so it still updates in place.
ALTER TABLE devices ADD COLUMN tags text NOT NULL DEFAULT '[]';
ALTER TABLE devices ADD COLUMN status_since bigint;
ALTER TABLE devices ADD COLUMN planned_at bigint;
UPDATE devices SET status_since = COALESCE(last_seen, created_at);
CREATE INDEX devices_status_watch ON devices(id) WHERE status IN ('ERROR', 'UPDATING', 'REBOOTING');
