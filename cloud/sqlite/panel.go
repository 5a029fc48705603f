package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// What the panel reads and changes beyond the public API's services: the
// fleet page's counts and search, and API keys with their creator and last
// use.

var _ cloud.KeyUseRecorder = (*DB)(nil)

// StatusCounts counts the organization's devices by status.
func (s *PanelStore) StatusCounts(ctx context.Context, orgID string) (map[resource.DeviceStatus]int, error) {
	st, err := s.db.readStmt(ctx, `SELECT status, COUNT(*) FROM devices WHERE org_id = ? GROUP BY status`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, orgID)
	counts, err := collect(rows, err, "status counts", sqlstore.ScanStatusCount)
	if err != nil {
		return nil, err
	}
	return sqlstore.CountsByStatus(counts), nil
}

// SearchDevices implements cloud.PanelStore (sqlstore.SearchDevices).
func (s *PanelStore) SearchDevices(ctx context.Context, orgID string, q cloud.DeviceSearch) (cloud.DevicePage, error) {
	page, err := sqlstore.SearchDevices(ctx, sqlConn{s.db.R}, orgID, q)
	return page, wrapErr("search devices", err)
}

// CreateOrgKey makes a key for the organization on behalf of k.CreatedBy
// ("" for the admin CLI) and stores its bcrypt hash (sqlstore.CreateKey). It
// returns the stored key and the full key string, which exists nowhere else
// afterwards.
func (s *PanelStore) CreateOrgKey(ctx context.Context, nk cloud.NewKey) (*cloud.APIKey, string, error) {
	k, key, err := sqlstore.CreateKey(ctx, sqlConn{s.db.W}, s.db.Org, nk, s.db.Now())
	return k, key, wrapErr("insert key", err)
}

// OrgKeys implements cloud.PanelStore (sqlstore.OrgKeys).
func (s *PanelStore) OrgKeys(ctx context.Context, orgID string) ([]cloud.KeyInfo, error) {
	keys, err := sqlstore.OrgKeys(ctx, sqlConn{s.db.R}, orgID)
	return keys, wrapErr("org keys", err)
}

// RevokeOrgKey revokes the organization's key id (idempotent: the first
// revocation time is kept); another organization's key is ENOTFOUND.
func (s *PanelStore) RevokeOrgKey(ctx context.Context, orgID, id string) (*cloud.APIKey, error) {
	db := s.db
	k, err := db.KeyByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if k.OrgID != orgID { // a key never changes organization
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	return db.RevokeKey(ctx, id)
}

// RecordKeyUse sets the key's last use to at, unless a later one within
// cloud.KeyUseResolution is already recorded.
func (db *DB) RecordKeyUse(ctx context.Context, id string, at time.Time) error {
	_, err := db.W.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
		at.UnixMilli(), id, at.Add(-cloud.KeyUseResolution).UnixMilli())
	if err != nil {
		return fmt.Errorf("sqlite: record key use: %w", err)
	}
	return nil
}

// WebhookSettings implements cloud.PanelStore (sqlstore.WebhookSettings).
func (s *PanelStore) WebhookSettings(ctx context.Context, orgID string) (cloud.WebhookSettings, error) {
	out, err := sqlstore.WebhookSettings(ctx, sqlConn{s.db.R}, orgID, s.db.Now())
	return out, wrapErr("webhook settings", err)
}

// RecentDeliveries summarizes the organization's newest deliveries.
func (s *PanelStore) RecentDeliveries(ctx context.Context, orgID string, limit int) ([]cloud.DeliverySummary, error) {
	db := s.db
	ds, err := db.WebhookDeliveries(ctx, orgID, limit)
	if err != nil {
		return nil, err
	}
	return cloud.SummarizeDeliveries(ds), nil
}

// RedeliverOrgWebhook queues a copy of the organization's delivery id.
func (s *PanelStore) RedeliverOrgWebhook(ctx context.Context, orgID, id string) (string, error) {
	if err := sqlstore.OrgDelivery(ctx, sqlConn{s.db.R}, orgID, id); err != nil {
		return "", wrapErr("redeliver", err)
	}
	return s.db.RedeliverWebhook(ctx, id)
}

// SetOrgAlertWebhook sets or clears the organization's alert webhook URL.
func (s *PanelStore) SetOrgAlertWebhook(ctx context.Context, orgID, url string) error {
	return s.db.SetOrgAlertWebhook(ctx, orgID, url)
}

// RotateOrgSecret gives the organization a new signing secret.
func (s *PanelStore) RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error) {
	return s.db.RotateOrgSecret(ctx, orgID, grace)
}
