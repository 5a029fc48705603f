-- The delivery log's filters (issue 29, Settings → Webhooks): a page of an
-- organization's deliveries of one device, or in one state, newest first,
-- is read in seq order from its cursor instead of walking every delivery
-- of the organization (webhook_deliveries_org serves no filter and the
-- event filter, which is rarely narrow).
CREATE INDEX webhook_deliveries_org_device ON webhook_deliveries(org_id, device_id, seq);
CREATE INDEX webhook_deliveries_org_state ON webhook_deliveries(org_id, state, seq);
