-- Agent link (0020-0039): per-device session state kept on the device row.
--   agent_session   id of the websocket session that owns the device now
--                   (NULL: none); a write of an older session is refused.
--   agent_deadline  Unix ms after which the device counts as gone (three
--                   heartbeat intervals after the last message); the sweeper
--                   marks it OFFLINE. NULL: not connected.
--   agent_heartbeat_ms  heartbeat period the agent announced in hello.
--   agent_last_seq  highest record sequence stored for the device.
--   agent_version   version string the agent announced in hello.
ALTER TABLE devices ADD COLUMN agent_session TEXT;
ALTER TABLE devices ADD COLUMN agent_deadline INTEGER;
ALTER TABLE devices ADD COLUMN agent_heartbeat_ms INTEGER NOT NULL DEFAULT 30000;
ALTER TABLE devices ADD COLUMN agent_last_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN agent_version TEXT NOT NULL DEFAULT '';
CREATE INDEX devices_agent_deadline ON devices(agent_deadline) WHERE agent_deadline IS NOT NULL;
-- Devices a relay left connected before this migration get a deadline now,
-- so that they go OFFLINE unless they reconnect.
UPDATE devices SET agent_deadline = CAST(strftime('%s','now') AS INTEGER) * 1000 + 90000
 WHERE status IN ('ONLINE', 'CONNECTING', 'REBOOTING', 'UPDATING', 'ERROR');
