package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
)

// PanelStore implements cloud.PanelStore on the store: users and sessions
// here, the rest in panel.go.
type PanelStore struct{ db *DB }

var _ cloud.PanelStore = (*PanelStore)(nil)

// NewPanelStore returns the panel's store of db.
func NewPanelStore(db *DB) *PanelStore { return &PanelStore{db: db} }

func userNotFound(id string) error { return cloud.Errorf(cloud.ENOTFOUND, "user %q not found", id) }

// CreateUser adds a user to an organization; an email already in use (in
// any organization) is ECONFLICT.
func (s *PanelStore) CreateUser(ctx context.Context, nu cloud.NewUser) (cloud.User, error) {
	email, err := cloud.NormalizeEmail(nu.Email)
	if err != nil {
		return cloud.User{}, err
	}
	if _, err := cloud.ParseRole(string(nu.Role)); err != nil {
		return cloud.User{}, err
	}
	if nu.PasswordHash == "" {
		return cloud.User{}, cloud.Errorf(cloud.EINVALID, "password is required")
	}
	now := s.db.Now().UTC().Truncate(time.Millisecond)
	u := cloud.User{ID: ids.New(), OrgID: nu.OrgID, Email: email, Role: nu.Role, PasswordHash: nu.PasswordHash, CreatedAt: now}
	err = s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM orgs WHERE id = ?`, u.OrgID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return cloud.Errorf(cloud.ENOTFOUND, "organization %q not found", u.OrgID)
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE email = ?`, email).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return cloud.Errorf(cloud.ECONFLICT, "a user with email %q already exists", email)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO users (`+sqlstore.UserColumns+`) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?)`,
			u.ID, u.OrgID, u.Email, string(u.Role), u.PasswordHash, now.UnixMilli())
		return err
	})
	if err != nil {
		return cloud.User{}, wrapErr("create user", err)
	}
	return u, nil
}

// wrapErr passes domain errors through and wraps the others as internal.
func wrapErr(what string, err error) error {
	if cloud.ErrorCode(err) != cloud.EINTERNAL {
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

// SetUserRole changes the role of the organization's user id. Demoting the
// last active OWNER is ECONFLICT.
func (s *PanelStore) SetUserRole(ctx context.Context, orgID, id string, role cloud.Role) (cloud.User, error) {
	if _, err := cloud.ParseRole(string(role)); err != nil {
		return cloud.User{}, err
	}
	return s.change(ctx, orgID, id, "set role", func(tx *sql.Tx, u *cloud.User) error {
		if role != cloud.RoleOwner {
			if err := s.keepAnOwner(ctx, tx, *u, "demoted"); err != nil {
				return err
			}
		}
		u.Role = role
		_, err := tx.ExecContext(ctx, `UPDATE users SET role = ? WHERE id = ?`, string(role), id)
		return err
	})
}

// DisableUser disables the organization's user id (idempotent): they can no
// longer sign in and their sessions end on their next request. Disabling the
// last active OWNER is ECONFLICT.
func (s *PanelStore) DisableUser(ctx context.Context, orgID, id string) (cloud.User, error) {
	return s.change(ctx, orgID, id, "disable user", func(tx *sql.Tx, u *cloud.User) error {
		if u.Disabled() {
			return nil
		}
		if err := s.keepAnOwner(ctx, tx, *u, "disabled"); err != nil {
			return err
		}
		u.DisabledAt = s.db.Now().UTC().Truncate(time.Millisecond)
		_, err := tx.ExecContext(ctx, `UPDATE users SET disabled_at = ? WHERE id = ?`, u.DisabledAt.UnixMilli(), id)
		return err
	})
}

// SetUserPassword stores a new password hash and ends the user's sessions
// signed in before now.
func (s *PanelStore) SetUserPassword(ctx context.Context, orgID, id, hash string) (cloud.User, error) {
	if hash == "" {
		return cloud.User{}, cloud.Errorf(cloud.EINVALID, "password is required")
	}
	return s.change(ctx, orgID, id, "set password", func(tx *sql.Tx, u *cloud.User) error {
		u.PasswordHash = hash
		u.PasswordChangedAt = s.db.Now().UTC().Truncate(time.Millisecond)
		_, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ?, password_changed_at = ? WHERE id = ?`, hash, u.PasswordChangedAt.UnixMilli(), id)
		return err
	})
}

// change reads the organization's user id in a write transaction and lets
// fn change it.
func (s *PanelStore) change(ctx context.Context, orgID, id, what string, fn func(tx *sql.Tx, u *cloud.User) error) (cloud.User, error) {
	var u cloud.User
	err := s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		u, err = sqlstore.ScanUser(tx.QueryRowContext(ctx, `SELECT `+sqlstore.UserColumns+` FROM users WHERE id = ? AND org_id = ?`, id, orgID))
		if errors.Is(err, sql.ErrNoRows) {
			return userNotFound(id)
		}
		if err != nil {
			return err
		}
		return fn(tx, &u)
	})
	if err != nil {
		return cloud.User{}, wrapErr(what, err)
	}
	return u, nil
}

// keepAnOwner refuses a change that would leave u's organization without an
// active OWNER (the writer's transaction serializes concurrent changes).
func (s *PanelStore) keepAnOwner(ctx context.Context, tx *sql.Tx, u cloud.User, verb string) error {
	if u.Role != cloud.RoleOwner || u.Disabled() {
		return nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE org_id = ? AND role = 'OWNER' AND disabled_at IS NULL AND id != ?`, u.OrgID, u.ID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return cloud.Errorf(cloud.ECONFLICT, "%s is the organization's last OWNER and cannot be %s", u.Email, verb)
	}
	return nil
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
