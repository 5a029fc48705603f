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

// PanelStore implements cloud.PanelStore on the store: users and sessions
// here, the key and status reads in panel.go, and what both stores do alike
// (a user's changes, the device search, keys, webhook settings) in
// sqlstore.Panel.
type PanelStore struct {
	db *DB
	sqlstore.Panel
}

var _ cloud.PanelStore = (*PanelStore)(nil)

// NewPanelStore returns the panel's store of db.
func NewPanelStore(db *DB) *PanelStore {
	return &PanelStore{db: db, Panel: sqlstore.NewPanel(tables{db}, db, sqlConn{db.R}, sqlConn{db.W}, wrapErr)}
}

// UserTx implements sqlstore.UserTables: the writer's transaction
// serializes the changes.
func (t tables) UserTx(ctx context.Context, orgID, what string, fn func(sqlstore.Querier) error) error {
	return wrapErr(what, t.db.WriteTx(ctx, func(tx *sql.Tx) error { return fn(sqlConn{tx}) }))
}

var userNotFound = sqlstore.UserNotFound

// CreateUser adds a user to an organization; an email already in use (in
// any organization) is ECONFLICT.
func (s *PanelStore) CreateUser(ctx context.Context, nu cloud.NewUser) (cloud.User, error) {
	u, err := sqlstore.NewUser(nu, s.db.Now())
	if err != nil {
		return cloud.User{}, err
	}
	err = s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM orgs WHERE id = ?`, u.OrgID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return sqlstore.OrgNotFound(u.OrgID)
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE email = ?`, u.Email).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return sqlstore.ErrEmailTaken(u.Email)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO users (`+sqlstore.UserColumns+`) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?)`,
			u.ID, u.OrgID, u.Email, string(u.Role), u.PasswordHash, u.CreatedAt.UnixMilli())
		return err
	})
	if err != nil {
		return cloud.User{}, wrapErr("create user", err)
	}
	return u, nil
}

// wrapErr passes nil and domain errors through and wraps the others as
// internal.
func wrapErr(what string, err error) error {
	if err == nil || cloud.ErrorCode(err) != cloud.EINTERNAL {
		return err
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// UserByID returns the user with id in any organization, or ENOTFOUND. The
// panel reads it on every request (a primary-key lookup).
func (s *PanelStore) UserByID(ctx context.Context, id string) (cloud.User, error) {
	st, err := s.db.readStmt(ctx, `SELECT `+sqlstore.UserColumns+` FROM users WHERE id = ?`)
	if err != nil {
		return cloud.User{}, err
	}
	u, err := sqlstore.ScanUser(st.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.User{}, userNotFound(id)
	}
	if err != nil {
		return cloud.User{}, fmt.Errorf("sqlite: user: %w", err)
	}
	return u, nil
}

// UserByEmail returns the user with email (any case), or ENOTFOUND.
func (s *PanelStore) UserByEmail(ctx context.Context, email string) (cloud.User, error) {
	e, err := cloud.NormalizeEmail(email)
	if err != nil {
		return cloud.User{}, cloud.Errorf(cloud.ENOTFOUND, "no user with that email")
	}
	u, err := sqlstore.ScanUser(s.db.R.QueryRowContext(ctx, `SELECT `+sqlstore.UserColumns+` FROM users WHERE email = ?`, e))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.User{}, cloud.Errorf(cloud.ENOTFOUND, "no user with that email")
	}
	if err != nil {
		return cloud.User{}, fmt.Errorf("sqlite: user by email: %w", err)
	}
	return u, nil
}

// ListUsers returns the organization's users, oldest first.
func (s *PanelStore) ListUsers(ctx context.Context, orgID string) ([]cloud.User, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+sqlstore.UserColumns+` FROM users WHERE org_id = ? ORDER BY created_at, id`, orgID)
	return collect(rows, err, "list users", sqlstore.ScanUser)
}

// FindSession returns the data of an unexpired session.
func (s *PanelStore) FindSession(ctx context.Context, tokenHash string) ([]byte, bool, error) {
	st, err := s.db.readStmt(ctx, `SELECT data FROM sessions WHERE token_hash = ? AND expires_at > ?`)
	if err != nil {
		return nil, false, err
	}
	var data []byte
	err = st.QueryRowContext(ctx, tokenHash, s.db.NowMs()).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: find session: %w", err)
	}
	return data, true, nil
}

// CommitSession inserts or replaces a session.
func (s *PanelStore) CommitSession(ctx context.Context, tokenHash string, data []byte, expiry time.Time) error {
	_, err := s.db.W.ExecContext(ctx, `INSERT INTO sessions (token_hash, data, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (token_hash) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at`,
		tokenHash, data, expiry.UnixMilli())
	if err != nil {
		return fmt.Errorf("sqlite: commit session: %w", err)
	}
	return nil
}

// DeleteSession removes a session (no error when there is none).
func (s *PanelStore) DeleteSession(ctx context.Context, tokenHash string) error {
	if _, err := s.db.W.ExecContext(ctx, `DELETE FROM sessions WHERE token_hash = ?`, tokenHash); err != nil {
		return fmt.Errorf("sqlite: delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions removes sessions expired before now.
func (s *PanelStore) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.W.ExecContext(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired sessions: %w", err)
	}
	return res.RowsAffected()
}
