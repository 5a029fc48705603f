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
