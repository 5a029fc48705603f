-- Alert engine: find a device's alerts of a rule by time (manual-resolve and
-- device_offline checks), and OFFLINE devices by last heartbeat (the
-- device_offline sweep).
CREATE INDEX alerts_device_rule_created ON alerts(device_id, rule_id, created_at);
CREATE INDEX devices_offline_last_seen ON devices(last_seen) WHERE status = 'OFFLINE';
