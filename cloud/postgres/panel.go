package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// PanelStore implements cloud.PanelStore on PostgreSQL: users, sessions,
// the fleet page's reads, keys with their creator and last use, and the
// webhook settings, for any number of relays.
type PanelStore struct {
	db *DB
	sqlstore.Panel
}

var (
	_ cloud.PanelStore     = (*PanelStore)(nil)
	_ cloud.KeyUseRecorder = (*DB)(nil)
)

// NewPanelStore returns the panel's store of db.
func NewPanelStore(db *DB) *PanelStore {
	return &PanelStore{db: db, Panel: sqlstore.NewPanel(tables{db}, db, pgConn{db.Pool}, pgConn{db.Pool}, wrapErr)}
}

// UserTx implements sqlstore.UserTables: the organization's row is locked
// first, so that changes to its users, from any relay, happen one at a
// time.
func (t tables) UserTx(ctx context.Context, orgID, what string, fn func(sqlstore.Querier) error) error {
	err := t.db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM orgs WHERE id = $1 FOR UPDATE`, orgID); err != nil {
			return err
		}
		return fn(pgConn{tx})
	})
	return wrapErr(what, err)
}

var userNotFound = sqlstore.UserNotFound

// wrapErr passes nil and domain errors through and wraps the others as
// internal.
func wrapErr(what string, err error) error {
	if err == nil || cloud.ErrorCode(err) != cloud.EINTERNAL {
		return err
	}
	return storeError("postgres: %s: %w", what, err)
}

// CreateUser adds a user; an email in use in any organization (the
// unique index decides, whichever relay races) is ECONFLICT.
func (s *PanelStore) CreateUser(ctx context.Context, nu cloud.NewUser) (cloud.User, error) {
	u, err := sqlstore.NewUser(nu, s.db.Now())
	if err != nil {
		return cloud.User{}, err
	}
	if _, err := s.db.Org(ctx, nu.OrgID); err != nil {
		return cloud.User{}, err
	}
	_, err = s.db.Pool.Exec(ctx, `INSERT INTO users (`+sqlstore.UserColumns+`) VALUES ($1, $2, $3, $4, $5, NULL, NULL, $6)`,
		u.ID, u.OrgID, u.Email, string(u.Role), u.PasswordHash, u.CreatedAt.UnixMilli())
	if isUnique(err) {
		return cloud.User{}, sqlstore.ErrEmailTaken(u.Email)
	}
	if err != nil {
		return cloud.User{}, storeError("postgres: create user: %w", err)
	}
	return u, nil
}

func (s *PanelStore) oneUser(ctx context.Context, notFound error, q string, args ...any) (cloud.User, error) {
	u, err := sqlstore.ScanUser(s.db.Pool.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return cloud.User{}, notFound
	}
	if err != nil {
		return cloud.User{}, storeError("postgres: user: %w", err)
	}
	return u, nil
}

// UserByID returns the user with id in any organization, or ENOTFOUND.
func (s *PanelStore) UserByID(ctx context.Context, id string) (cloud.User, error) {
	return s.oneUser(ctx, userNotFound(id), `SELECT `+sqlstore.UserColumns+` FROM users WHERE id = $1`, id)
}

// UserByEmail returns the user with email (any case), or ENOTFOUND.
func (s *PanelStore) UserByEmail(ctx context.Context, email string) (cloud.User, error) {
	notFound := cloud.Errorf(cloud.ENOTFOUND, "no user with that email")
	e, err := cloud.NormalizeEmail(email)
	if err != nil {
		return cloud.User{}, notFound
	}
	return s.oneUser(ctx, notFound, `SELECT `+sqlstore.UserColumns+` FROM users WHERE email = $1`, e)
}

// ListUsers returns the organization's users, oldest first.
func (s *PanelStore) ListUsers(ctx context.Context, orgID string) ([]cloud.User, error) {
	out, err := query(ctx, s.db, "list users", sqlstore.ScanUser, `SELECT `+sqlstore.UserColumns+` FROM users WHERE org_id = $1 ORDER BY created_at, id`, orgID)
	if out == nil && err == nil {
		out = []cloud.User{}
	}
	return out, err
}

// FindSession returns the data of an unexpired session.
func (s *PanelStore) FindSession(ctx context.Context, tokenHash string) ([]byte, bool, error) {
	var data []byte
	err := s.db.Pool.QueryRow(ctx, `SELECT data FROM sessions WHERE token_hash = $1 AND expires_at > $2`, tokenHash, s.db.NowMs()).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, storeError("postgres: find session: %w", err)
	}
	return data, true, nil
}

// CommitSession inserts or replaces a session.
func (s *PanelStore) CommitSession(ctx context.Context, tokenHash string, data []byte, expiry time.Time) error {
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO sessions (token_hash, data, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (token_hash) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at`, tokenHash, data, expiry.UnixMilli())
	if err != nil {
		return storeError("postgres: commit session: %w", err)
	}
	return nil
}

// DeleteSession removes a session (no error when there is none).
func (s *PanelStore) DeleteSession(ctx context.Context, tokenHash string) error {
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM sessions WHERE token_hash = $1`, tokenHash); err != nil {
		return storeError("postgres: delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions removes sessions expired before now.
func (s *PanelStore) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1`, now.UnixMilli())
	if err != nil {
		return 0, storeError("postgres: delete expired sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// StatusCounts counts the organization's devices by status.
func (s *PanelStore) StatusCounts(ctx context.Context, orgID string) (map[resource.DeviceStatus]int, error) {
	counts, err := query(ctx, s.db, "status counts", sqlstore.ScanStatusCount, `SELECT status, COUNT(*) FROM devices WHERE org_id = $1 GROUP BY status`, orgID)
	if err != nil {
		return nil, err
	}
	return sqlstore.CountsByStatus(counts), nil
}

// RevokeOrgKey revokes the organization's key (the first time is kept).
func (s *PanelStore) RevokeOrgKey(ctx context.Context, orgID, id string) (*cloud.APIKey, error) {
	k, err := sqlstore.ScanKey(s.db.Pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 AND org_id = $3 RETURNING `+sqlstore.KeyColumns, s.db.NowMs(), id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id)
	}
	if err != nil {
		return nil, storeError("postgres: revoke key: %w", err)
	}
	return k, nil
}

// RecordKeyUse sets the key's last use to at, unless one within
// cloud.KeyUseResolution is already recorded.
func (db *DB) RecordKeyUse(ctx context.Context, id string, at time.Time) error {
	_, err := db.Pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)`,
		at.UnixMilli(), id, at.Add(-cloud.KeyUseResolution).UnixMilli())
	if err != nil {
		return storeError("postgres: record key use: %w", err)
	}
	return nil
}
