-- The channels a device reported move from one serial_channels row each
-- into the device row (devices.channel_reports: a JSON array, an object per
-- channel, cloud.EncodeChannelReports), issue 31: a heartbeat that changed
-- a channel upserted its row in a statement of its own, while it rewrites
-- the device row anyway. serial_channels keeps the desired configurations
-- only.
ALTER TABLE devices ADD COLUMN channel_reports text;
UPDATE devices d SET channel_reports = r.reports FROM (
    SELECT device_id, json_agg(json_build_object('id', channel_id, 'available', available, 'live', live, 'txOn', tx_on, 'error', error,
        'passthroughAddress', COALESCE(passthrough_address, ''), 'points', COALESCE(NULLIF(points, '')::json, '[]'::json)) ORDER BY channel_id)::text AS reports
    FROM serial_channels WHERE available IS NOT NULL GROUP BY device_id) r
WHERE d.id = r.device_id;
DELETE FROM serial_channels WHERE config IS NULL;
ALTER TABLE serial_channels DROP COLUMN available, DROP COLUMN live, DROP COLUMN tx_on, DROP COLUMN error,
    DROP COLUMN passthrough_address, DROP COLUMN points;
