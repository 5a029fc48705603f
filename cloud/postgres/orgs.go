package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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
	err = db.writeTx(ctx, func(tx pgx.Tx) error { return sqlstore.InsertOrg(ctx, pgConn{tx}, org, addRuleSQL) })
	if err != nil {
		return cloud.Org{}, storeError("postgres: create org: %w", err)
	}
	return org, nil
}

// addRuleSQL adds an alert rule unless the organization has one of its name
// (sqlstore.AddDefaultRules).
const addRuleSQL = `INSERT INTO alert_rules (id, org_id, name, severity, metric, threshold, clear_threshold, consecutive, enabled, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, true, ?) ON CONFLICT (org_id, name) DO NOTHING`

// Org returns the organization with id, or ENOTFOUND.
func (db *DB) Org(ctx context.Context, id string) (cloud.Org, error) {
	o, err := sqlstore.ScanOrg(db.Pool.QueryRow(ctx, `SELECT `+sqlstore.OrgColumns+` FROM orgs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return cloud.Org{}, orgNotFound(id)
	}
	if err != nil {
		return cloud.Org{}, storeError("postgres: org: %w", err)
	}
	return o, nil
}

var orgNotFound = sqlstore.OrgNotFound

// ListOrgs returns every organization, oldest first.
func (db *DB) ListOrgs(ctx context.Context) ([]cloud.Org, error) {
	rows, err := db.Pool.Query(ctx, `SELECT `+sqlstore.OrgColumns+` FROM orgs ORDER BY created_at, id`)
	if err != nil {
		return nil, storeError("postgres: list orgs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cloud.Org, error) { return sqlstore.ScanOrg(r) })
	if err != nil {
		return nil, storeError("postgres: list orgs: %w", err)
	}
	if out == nil {
		out = []cloud.Org{}
	}
	return out, nil
}

// SetOrgAlertWebhook implements cloud.Store (sqlstore.SetOrgAlertWebhook).
func (db *DB) SetOrgAlertWebhook(ctx context.Context, orgID, url string) error {
	return wrapErr("set alert webhook", sqlstore.SetOrgAlertWebhook(ctx, pgConn{db.Pool}, orgID, url))
}

// RotateOrgSecret implements cloud.Store (sqlstore.RotateOrgSecret).
func (db *DB) RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error) {
	secret, err := sqlstore.RotateOrgSecret(ctx, pgConn{db.Pool}, orgID, grace, db.Now())
	return secret, wrapErr("rotate secret", err)
}

// CreateKey makes a key for the organization and stores its bcrypt hash
// (sqlstore.CreateKey).
func (db *DB) CreateKey(ctx context.Context, orgID, name string, scopes []string, expiresIn time.Duration) (*cloud.APIKey, string, error) {
	k, key, err := sqlstore.CreateKey(ctx, pgConn{db.Pool}, db.Org, cloud.NewKey{OrgID: orgID, Name: name, Scopes: scopes, ExpiresIn: expiresIn}, db.Now())
	return k, key, wrapErr("insert key", err)
}

// KeyByID returns the key with id, in any organization, or ENOTFOUND. It is
// read on every authenticated request.
func (db *DB) KeyByID(ctx context.Context, id string) (*cloud.APIKey, error) {
	k, err := sqlstore.ScanKey(db.Pool.QueryRow(ctx, `SELECT `+sqlstore.KeyColumns+` FROM api_keys WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	if err != nil {
		return nil, storeError("postgres: key: %w", err)
	}
	return k, nil
}

// ListKeys returns the organization's keys, oldest first.
func (db *DB) ListKeys(ctx context.Context, orgID string) ([]*cloud.APIKey, error) {
	rows, err := db.Pool.Query(ctx, `SELECT `+sqlstore.KeyColumns+` FROM api_keys WHERE org_id = $1 ORDER BY created_at, id`, orgID)
	if err != nil {
		return nil, storeError("postgres: list keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*cloud.APIKey, error) { return sqlstore.ScanKey(r) })
	if err != nil {
		return nil, storeError("postgres: list keys: %w", err)
	}
	if out == nil {
		out = []*cloud.APIKey{}
	}
	return out, nil
}

// RevokeKey revokes the key (the first revocation time is kept).
func (db *DB) RevokeKey(ctx context.Context, id string) (*cloud.APIKey, error) {
	k, err := sqlstore.ScanKey(db.Pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 RETURNING `+sqlstore.KeyColumns, db.NowMs(), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	if err != nil {
		return nil, storeError("postgres: revoke key: %w", err)
	}
	return k, nil
}
