package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// PanelStore is cloud.PanelStore, written once: users and sessions
// (users.go), the fleet page's reads, the organization's keys with their
// creator and last use, and its webhook settings and deliveries (Store's
// SetOrgAlertWebhook and RotateOrgSecret).
type PanelStore struct{ *Store }

var _ cloud.PanelStore = PanelStore{}

// SearchDevices returns one page of the organization's devices, oldest
// first, filtered by status, tags and a case-insensitive substring, with
// the number of matches (SearchDevices on the reader).
func (p PanelStore) SearchDevices(ctx context.Context, orgID string, q cloud.DeviceSearch) (cloud.DevicePage, error) {
	page, err := SearchDevices(ctx, p.R, p.Dialect, orgID, q)
	return page, p.Wrap("search devices", err)
}

// CreateOrgKey makes a key for the organization on behalf of nk.CreatedBy
// ("" for the admin CLI) and stores its bcrypt hash (CreateKey). It
// returns the stored key and the full key string, which exists nowhere else
// afterwards.
func (p PanelStore) CreateOrgKey(ctx context.Context, nk cloud.NewKey) (*cloud.APIKey, string, error) {
	return p.createKey(ctx, nk)
}

// OrgKeys lists the organization's keys newest first, revoked ones
// included, with their creator's email and last use (OrgKeys on the
// reader).
func (p PanelStore) OrgKeys(ctx context.Context, orgID string) ([]cloud.KeyInfo, error) {
	keys, err := OrgKeys(ctx, p.R, orgID)
	return keys, p.Wrap("org keys", err)
}

// WebhookSettings returns the organization's alert webhook URL, signing
// secret and until when the previous secret still signs (WebhookSettings on
// the reader).
func (p PanelStore) WebhookSettings(ctx context.Context, orgID string) (cloud.WebhookSettings, error) {
	out, err := WebhookSettings(ctx, p.R, orgID, p.Clock())
	return out, p.Wrap("webhook settings", err)
}

// RecentDeliveries summarizes the organization's newest deliveries
// (WebhookDeliveries on the reader).
func (p PanelStore) RecentDeliveries(ctx context.Context, orgID string, limit int) ([]cloud.DeliverySummary, error) {
	ds, err := WebhookDeliveries(ctx, p.R, orgID, limit)
	if err != nil {
		return nil, p.Wrap("deliveries", err)
	}
	return cloud.SummarizeDeliveries(ds), nil
}

// DeliveryLog reads a page of the organization's delivery log
// (DeliveryLog on the reader).
func (p PanelStore) DeliveryLog(ctx context.Context, orgID string, f cloud.DeliveryFilter) (cloud.DeliveryLogPage, error) {
	page, err := DeliveryLog(ctx, p.R, orgID, f)
	return page, p.Wrap("delivery log", err)
}

// StatusCounts counts the organization's devices by status.
func (p PanelStore) StatusCounts(ctx context.Context, orgID string) (map[resource.DeviceStatus]int, error) {
	counts, err := Collect(ctx, p.R, ScanStatusCount, `SELECT status, COUNT(*) FROM devices WHERE org_id = ? GROUP BY status`, orgID)
	if err != nil {
		return nil, p.Wrap("status counts", err)
	}
	return CountsByStatus(counts), nil
}

// RedeliverOrgWebhook queues a copy of the organization's delivery id
// (OrgDelivery, then the store's RedeliverWebhook).
func (p PanelStore) RedeliverOrgWebhook(ctx context.Context, orgID, id string) (string, error) {
	if err := OrgDelivery(ctx, p.R, orgID, id); err != nil {
		return "", p.Wrap("redeliver", err)
	}
	return p.RedeliverWebhook(ctx, id)
}
