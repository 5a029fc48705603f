-- Shared outbox: a relay claims whole ordering queues (device and kind) of
-- pending deliveries; find a queue's pending rows by device.
CREATE INDEX webhook_deliveries_pending_device ON webhook_deliveries(device_id, seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_lease_owner ON webhook_deliveries(lease_owner) WHERE state = 'pending';
