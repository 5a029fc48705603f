package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
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
// ("" for the admin CLI) and stores its bcrypt hash. It returns the stored
// key and the full key string, which exists nowhere else afterwards.
func (s *PanelStore) CreateOrgKey(ctx context.Context, nk cloud.NewKey) (*cloud.APIKey, string, error) {
	db := s.db
	k, key, err := apikey.New(nk.OrgID, nk.Name, nk.Scopes, nk.ExpiresIn, db.Now())
	if err != nil {
		return nil, "", err
	}
	if _, err := db.Org(ctx, nk.OrgID); err != nil {
		return nil, "", err
	}
	var createdBy sql.NullString
	if nk.CreatedBy != "" {
		createdBy = sql.NullString{String: nk.CreatedBy, Valid: true}
	}
	_, err = db.W.ExecContext(ctx, `INSERT INTO api_keys (id, org_id, name, hash, scopes, expires_at, revoked_at, created_at, created_by)
		VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)`,
		k.ID, k.OrgID, k.Name, k.Hash, strings.Join(k.Scopes, ","), TimeMs(k.ExpiresAt), k.CreatedAt.UnixMilli(), createdBy)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: insert key: %w", err)
	}
	return k, key, nil
}

// OrgKeys lists the organization's keys newest first, revoked ones
// included, with their creator's email and last use.
func (s *PanelStore) OrgKeys(ctx context.Context, orgID string) ([]cloud.KeyInfo, error) {
	db := s.db
	rows, err := db.R.QueryContext(ctx, `SELECT k.id, k.org_id, k.name, k.hash, k.scopes, k.expires_at, k.revoked_at, k.created_at,
		COALESCE(u.email, ''), k.last_used_at
		FROM api_keys k LEFT JOIN users u ON u.id = k.created_by WHERE k.org_id = ? ORDER BY k.created_at DESC, k.id DESC`, orgID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: org keys: %w", err)
	}
	defer rows.Close()
	out := []cloud.KeyInfo{}
	for rows.Next() {
		var email string
		var used sql.NullInt64
		k, err := sqlstore.ScanKey(scanAlso{rows, []any{&email, &used}})
		if err != nil {
			return nil, fmt.Errorf("sqlite: org keys: %w", err)
		}
		out = append(out, cloud.KeyInfo{APIKey: *k, CreatedByEmail: email, LastUsedAt: MsTime(used)})
	}
	return out, rows.Err()
}

// scanAlso scans extra columns after those its caller names.
type scanAlso struct {
	sc    interface{ Scan(...any) error }
	extra []any
}

func (s scanAlso) Scan(dest ...any) error { return s.sc.Scan(append(dest, s.extra...)...) }

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
