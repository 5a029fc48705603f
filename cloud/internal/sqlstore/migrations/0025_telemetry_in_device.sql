-- The time of a device's last heartbeat (telemetryAt of its serial state)
-- moves from its serial_state row to its device row (issue 31): every
-- heartbeat already rewrites the device row (last_seen), and writing the
-- same time into a second table's row cost the store writer a fifth of its
-- time per heartbeat. serial_state is now written by a heartbeat only when
-- the agent's applied configuration version moved.
ALTER TABLE devices ADD COLUMN telemetry_at bigint;
UPDATE devices SET telemetry_at = (SELECT s.telemetry_at FROM serial_state s WHERE s.device_id = devices.id);
ALTER TABLE serial_state DROP COLUMN telemetry_at;
