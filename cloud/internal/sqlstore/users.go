package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

// Tx is a store's transaction as the shared code runs statements in it:
// they are written with ? placeholders (the PostgreSQL store numbers them),
// and a missing row scans as sql.ErrNoRows in either store.
type Tx interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// UserTables is what Users needs of a store.
type UserTables interface {
	// UserTx runs fn in a write transaction in which the organization's
	// users change one at a time, whichever relay changes them; its error,
	// unless a domain error, is wrapped as the store's failure to do what.
	UserTx(ctx context.Context, orgID, what string, fn func(Tx) error) error
	// Now is the store's clock.
	Now() time.Time
}

// NewUser validates nu and makes the user it adds: a fresh id, the email
// normalized, created at now to the millisecond.
func NewUser(nu cloud.NewUser, now time.Time) (cloud.User, error) {
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
	return cloud.User{ID: ids.New(), OrgID: nu.OrgID, Email: email, Role: nu.Role, PasswordHash: nu.PasswordHash,
		CreatedAt: now.UTC().Truncate(time.Millisecond)}, nil
}

// ErrEmailTaken is CreateUser's ECONFLICT for an email in use (in any
// organization).
func ErrEmailTaken(email string) error {
	return cloud.Errorf(cloud.ECONFLICT, "a user with email %q already exists", email)
}

// Users are the panel's changes of a user (part of cloud.PanelStore), on a
// store's tables.
type Users struct{ Tables UserTables }

// SetUserRole changes the role of the organization's user id. Demoting the
// last active OWNER is ECONFLICT.
func (s Users) SetUserRole(ctx context.Context, orgID, id string, role cloud.Role) (cloud.User, error) {
	if _, err := cloud.ParseRole(string(role)); err != nil {
		return cloud.User{}, err
	}
	return s.change(ctx, orgID, id, "set role", func(tx Tx, u *cloud.User) error {
		if role != cloud.RoleOwner {
			if err := keepAnOwner(ctx, tx, *u, "demoted"); err != nil {
				return err
			}
		}
		u.Role = role
		_, err := tx.Exec(ctx, `UPDATE users SET role = ? WHERE id = ?`, string(role), id)
		return err
	})
}

// DisableUser disables the organization's user id (idempotent): they can no
// longer sign in and their sessions end on their next request. Disabling the
// last active OWNER is ECONFLICT.
func (s Users) DisableUser(ctx context.Context, orgID, id string) (cloud.User, error) {
	return s.change(ctx, orgID, id, "disable user", func(tx Tx, u *cloud.User) error {
		if u.Disabled() {
			return nil
		}
		if err := keepAnOwner(ctx, tx, *u, "disabled"); err != nil {
			return err
		}
		u.DisabledAt = s.Tables.Now().UTC().Truncate(time.Millisecond)
		_, err := tx.Exec(ctx, `UPDATE users SET disabled_at = ? WHERE id = ?`, u.DisabledAt.UnixMilli(), id)
		return err
	})
}

// SetUserPassword stores a new password hash and ends the user's sessions
// signed in before now.
func (s Users) SetUserPassword(ctx context.Context, orgID, id, hash string) (cloud.User, error) {
	if hash == "" {
		return cloud.User{}, cloud.Errorf(cloud.EINVALID, "password is required")
	}
	return s.change(ctx, orgID, id, "set password", func(tx Tx, u *cloud.User) error {
		u.PasswordHash = hash
		u.PasswordChangedAt = s.Tables.Now().UTC().Truncate(time.Millisecond)
		_, err := tx.Exec(ctx, `UPDATE users SET password_hash = ?, password_changed_at = ? WHERE id = ?`, hash, u.PasswordChangedAt.UnixMilli(), id)
		return err
	})
}

// change reads the organization's user id in a UserTx and lets fn change
// it; ENOTFOUND without the user.
func (s Users) change(ctx context.Context, orgID, id, what string, fn func(tx Tx, u *cloud.User) error) (cloud.User, error) {
	var u cloud.User
	err := s.Tables.UserTx(ctx, orgID, what, func(tx Tx) error {
		var err error
		u, err = ScanUser(tx.QueryRow(ctx, `SELECT `+UserColumns+` FROM users WHERE id = ? AND org_id = ?`, id, orgID))
		if errors.Is(err, sql.ErrNoRows) {
			return UserNotFound(id)
		}
		if err != nil {
			return err
		}
		return fn(tx, &u)
	})
	if err != nil {
		return cloud.User{}, err
	}
	return u, nil
}

// UserNotFound is ENOTFOUND for user id.
func UserNotFound(id string) error { return cloud.Errorf(cloud.ENOTFOUND, "user %q not found", id) }

// keepAnOwner refuses a change that would leave u's organization without
// an active OWNER.
func keepAnOwner(ctx context.Context, tx Tx, u cloud.User, verb string) error {
	if u.Role != cloud.RoleOwner || u.Disabled() {
		return nil
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM users WHERE org_id = ? AND role = 'OWNER' AND disabled_at IS NULL AND id <> ?`, u.OrgID, u.ID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return cloud.Errorf(cloud.ECONFLICT, "%s is the organization's last OWNER and cannot be %s", u.Email, verb)
	}
	return nil
}
