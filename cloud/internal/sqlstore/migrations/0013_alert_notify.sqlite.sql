-- Alert notifications (issue 27): the outbox deliveries of an alert change
-- are written in the transaction that makes it (sqlstore.QueueAlertNotifications).
-- notified_at: when the alert last notified its rule's channels (opened,
-- reminded; repeatEvery counts from it); silenced: the alert opened under
-- a silence and notified no channel.
ALTER TABLE alerts ADD COLUMN notified_at INTEGER;
ALTER TABLE alerts ADD COLUMN silenced INTEGER NOT NULL DEFAULT 0;
UPDATE alerts SET notified_at = created_at WHERE state <> 'RESOLVED';
-- Remind: the ACTIVE alerts by when they last notified.
CREATE INDEX alerts_active_notified ON alerts(notified_at) WHERE state = 'ACTIVE';

-- kind: how a delivery is sent ('' the signed webhook as before, 'webhook'
-- a channel's signed webhook, 'slack', 'email'); channel_id: the
-- notification channel it is for ('' for the organization's alert webhook
-- and signal forwarding).
ALTER TABLE webhook_deliveries ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_deliveries ADD COLUMN channel_id TEXT NOT NULL DEFAULT '';
