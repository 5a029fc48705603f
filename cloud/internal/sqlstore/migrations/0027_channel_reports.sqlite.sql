-- The channels a device reported move from one serial_channels row each
-- into the device row (devices.channel_reports: a JSON array, an object per
-- channel, cloud.EncodeChannelReports), issue 31: a heartbeat that changed
-- a channel upserted its row in a statement and a page of its own, 40 % of
-- the store writer's time per heartbeat, while it rewrites the device row
-- anyway. serial_channels keeps the desired configurations only.
ALTER TABLE devices ADD COLUMN channel_reports TEXT;
UPDATE devices SET channel_reports = (
    SELECT json_group_array(json(r.o)) FROM (
        SELECT json_object('id', c.channel_id, 'available', json(CASE WHEN c.available THEN 'true' ELSE 'false' END),
            'live', c.live, 'txOn', json(CASE WHEN c.tx_on THEN 'true' ELSE 'false' END), 'error', c.error,
            'passthroughAddress', COALESCE(c.passthrough_address, ''), 'points', json(COALESCE(NULLIF(c.points, ''), '[]'))) AS o
        FROM serial_channels c WHERE c.device_id = devices.id AND c.available IS NOT NULL ORDER BY c.channel_id) r)
WHERE EXISTS (SELECT 1 FROM serial_channels c WHERE c.device_id = devices.id AND c.available IS NOT NULL);
DELETE FROM serial_channels WHERE config IS NULL;
ALTER TABLE serial_channels DROP COLUMN available;
ALTER TABLE serial_channels DROP COLUMN live;
ALTER TABLE serial_channels DROP COLUMN tx_on;
ALTER TABLE serial_channels DROP COLUMN error;
ALTER TABLE serial_channels DROP COLUMN passthrough_address;
ALTER TABLE serial_channels DROP COLUMN points;
