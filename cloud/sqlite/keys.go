package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.KeyService = (*DB)(nil)

// CreateKey makes a key for the organization and stores its bcrypt hash
// (sqlstore.CreateKey). expiresIn 0 means the key never expires. It returns
// the stored key and the full key string, which exists nowhere else
// afterwards.
func (db *DB) CreateKey(ctx context.Context, orgID, name string, scopes []string, expiresIn time.Duration) (*cloud.APIKey, string, error) {
	k, key, err := sqlstore.CreateKey(ctx, sqlConn{db.W}, db.Org, cloud.NewKey{OrgID: orgID, Name: name, Scopes: scopes, ExpiresIn: expiresIn}, db.Now())
	return k, key, wrapErr("insert key", err)
}

const (
	listKeysSQL = `SELECT ` + sqlstore.KeyColumns + ` FROM api_keys WHERE org_id = ? ORDER BY created_at, id`
)

// KeyByID returns the key with id, in any organization, or ENOTFOUND. It is
// read on every authenticated request (a primary-key lookup through a
// prepared statement).
func (db *DB) KeyByID(ctx context.Context, id string) (*cloud.APIKey, error) {
	st, err := db.readStmt(ctx, `SELECT `+sqlstore.KeyColumns+` FROM api_keys WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	k, err := sqlstore.ScanKey(st.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: key: %w", err)
	}
	return k, nil
}

// ListKeys returns the organization's keys, oldest first, revoked ones
// included.
func (db *DB) ListKeys(ctx context.Context, orgID string) ([]*cloud.APIKey, error) {
	rows, err := db.R.QueryContext(ctx, listKeysSQL, orgID)
	return collect(rows, err, "list keys", sqlstore.ScanKey)
}

// RevokeKey revokes the key with id (idempotent: the first revocation time
// is kept) and returns it; ENOTFOUND for an unknown id.
func (db *DB) RevokeKey(ctx context.Context, id string) (*cloud.APIKey, error) {
	var k *cloud.APIKey
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, db.NowMs(), id); err != nil {
			return err
		}
		var err error
		k, err = sqlstore.ScanKey(tx.QueryRowContext(ctx, `SELECT `+sqlstore.KeyColumns+` FROM api_keys WHERE id = ?`, id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: revoke key: %w", err)
	}
	return k, nil
}
