package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// CreateOrg creates an organization with a fresh webhook signing secret and
// the default alert rules.
func (db *DB) CreateOrg(ctx context.Context, name string) (cloud.Org, error) {
	org, err := sqlstore.NewOrg(name, db.Now())
	if err != nil {
		return cloud.Org{}, err
	}
	err = db.WriteTx(ctx, func(tx *sql.Tx) error { return sqlstore.InsertOrg(ctx, sqlConn{tx}, org, addRuleSQL) })
	if err != nil {
		return cloud.Org{}, fmt.Errorf("sqlite: create org: %w", err)
	}
	return org, nil
}

// addRuleSQL adds an alert rule unless the organization has one of its name
// (sqlstore.AddDefaultRules).
const addRuleSQL = `INSERT OR IGNORE INTO alert_rules (id, org_id, name, severity, metric, threshold, clear_threshold, consecutive, enabled, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)`

// Org returns the organization with id, or ENOTFOUND.
func (db *DB) Org(ctx context.Context, id string) (cloud.Org, error) {
	o, err := sqlstore.ScanOrg(db.R.QueryRowContext(ctx, `SELECT `+sqlstore.OrgColumns+` FROM orgs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.Org{}, sqlstore.OrgNotFound(id)
	}
	if err != nil {
		return cloud.Org{}, fmt.Errorf("sqlite: org: %w", err)
	}
	return o, nil
}

// ListOrgs returns every organization, oldest first (admin use).
func (db *DB) ListOrgs(ctx context.Context) ([]cloud.Org, error) {
	rows, err := db.R.QueryContext(ctx, `SELECT `+sqlstore.OrgColumns+` FROM orgs ORDER BY created_at, id`)
	return collect(rows, err, "list orgs", sqlstore.ScanOrg)
}
