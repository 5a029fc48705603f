-- Webhook secret rotation: after `org rotate-secret --grace D`, the previous
-- secret also signs the Standard Webhooks header (webhook-signature holds
-- both) until previous_secret_until (Unix ms).
ALTER TABLE orgs ADD COLUMN previous_webhook_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE orgs ADD COLUMN previous_secret_until INTEGER NOT NULL DEFAULT 0;
