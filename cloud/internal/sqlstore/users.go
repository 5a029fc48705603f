package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

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
		MustChangePassword: nu.MustChangePassword, CreatedAt: now.UTC().Truncate(time.Millisecond)}, nil
}

// ErrEmailTaken is CreateUser's ECONFLICT for an email in use in the
// same organization (other organizations' accounts are none of its
// business).
func ErrEmailTaken(email string) error {
	return cloud.Errorf(cloud.ECONFLICT, "a member with email %q already exists in this organization", email)
}

// userTx runs fn in a write transaction in which the organization's
// users change one at a time, whichever relay changes them (the
// dialect's LockOrg); its error, unless a domain error, is wrapped as the
// store's failure to do what.
func (s *Store) userTx(ctx context.Context, orgID, what string, fn func(Querier) error) error {
	return s.Wrap(what, s.Tx(ctx, func(tx Querier) error {
		if s.LockOrg != "" {
			if _, err := tx.Exec(ctx, s.LockOrg, orgID); err != nil {
				return err
			}
		}
		return fn(tx)
	}))
}

// CreateUser adds a user to an organization; an email in use in that
// organization (the unique index on org and email decides, whichever
// relay races) is ECONFLICT.
func (p PanelStore) CreateUser(ctx context.Context, nu cloud.NewUser) (cloud.User, error) {
	u, err := NewUser(nu, p.Clock())
	if err != nil {
		return cloud.User{}, err
	}
	if _, err := p.Org(ctx, nu.OrgID); err != nil {
		return cloud.User{}, err
	}
	err = p.Tx(ctx, func(tx Querier) error {
		if err := insertUser(ctx, tx, u); err != nil {
			return err
		}
		return p.auditMember(ctx, tx, u, cloud.ActionMemberAdded, map[string]any{"email": u.Email, "role": u.Role})
	})
	if p.IsUnique(err) {
		return cloud.User{}, ErrEmailTaken(u.Email)
	}
	if err != nil {
		return cloud.User{}, p.Wrap("create user", err)
	}
	return u, nil
}

func (p PanelStore) oneUser(ctx context.Context, notFound error, q string, args ...any) (cloud.User, error) {
	u, err := ScanUser(p.R.QueryRow(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.User{}, notFound
	}
	return u, p.Wrap("user", err)
}

// UserByID returns the user with id in any organization, or ENOTFOUND. The
// panel reads it on every request (a primary-key lookup).
func (p PanelStore) UserByID(ctx context.Context, id string) (cloud.User, error) {
	return p.oneUser(ctx, UserNotFound(id), `SELECT `+UserColumns+` FROM users WHERE id = ?`, id)
}

// UserByOrgEmail returns the organization's user with email (any case),
// or ENOTFOUND.
func (p PanelStore) UserByOrgEmail(ctx context.Context, orgID, email string) (cloud.User, error) {
	notFound := cloud.Errorf(cloud.ENOTFOUND, "no user with that email")
	e, err := cloud.NormalizeEmail(email)
	if err != nil {
		return cloud.User{}, notFound
	}
	return p.oneUser(ctx, notFound, `SELECT `+UserColumns+` FROM users WHERE org_id = ? AND email = ?`, orgID, e)
}

// ListUsers returns the organization's users, oldest first.
func (p PanelStore) ListUsers(ctx context.Context, orgID string) ([]cloud.User, error) {
	out, err := Collect(ctx, p.R, ScanUser, `SELECT `+UserColumns+` FROM users WHERE org_id = ? ORDER BY created_at, id`, orgID)
	return out, p.Wrap("list users", err)
}

// FindSession returns the data of an unexpired session.
func (p PanelStore) FindSession(ctx context.Context, tokenHash string) ([]byte, bool, error) {
	var data []byte
	err := p.R.QueryRow(ctx, `SELECT data FROM sessions WHERE token_hash = ? AND expires_at > ?`, tokenHash, p.nowMs()).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, p.Wrap("find session", err)
	}
	return data, true, nil
}

// CommitSession inserts or replaces a session.
func (p PanelStore) CommitSession(ctx context.Context, tokenHash string, data []byte, expiry time.Time) error {
	_, err := p.W.Exec(ctx, `INSERT INTO sessions (token_hash, data, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (token_hash) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at`, tokenHash, data, expiry.UnixMilli())
	return p.Wrap("commit session", err)
}

// DeleteSession removes a session (no error when there is none).
func (p PanelStore) DeleteSession(ctx context.Context, tokenHash string) error {
	_, err := p.W.Exec(ctx, `DELETE FROM sessions WHERE token_hash = ?`, tokenHash)
	return p.Wrap("delete session", err)
}

// DeleteExpiredSessions removes sessions expired before now.
func (p PanelStore) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	n, err := p.W.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, now.UnixMilli())
	return n, p.Wrap("delete expired sessions", err)
}

// SetUserRole changes the role of the organization's user id. Demoting the
// last active OWNER is ECONFLICT.
func (p PanelStore) SetUserRole(ctx context.Context, orgID, id string, role cloud.Role) (cloud.User, error) {
	if _, err := cloud.ParseRole(string(role)); err != nil {
		return cloud.User{}, err
	}
	return p.change(ctx, orgID, id, "set role", func(tx Querier, u *cloud.User) error {
		if role != cloud.RoleOwner {
			if err := keepAnOwner(ctx, tx, *u, "demoted"); err != nil {
				return err
			}
		}
		from := u.Role
		u.Role = role
		if _, err := tx.Exec(ctx, `UPDATE users SET role = ? WHERE id = ?`, string(role), id); err != nil || from == role {
			return err
		}
		return p.auditMember(ctx, tx, *u, cloud.ActionMemberRoleChanged, map[string]any{"email": u.Email, "from": from, "to": role})
	})
}

// DisableUser disables the organization's user id (idempotent): they can no
// longer sign in and their sessions end on their next request. Disabling the
// last active OWNER is ECONFLICT.
func (p PanelStore) DisableUser(ctx context.Context, orgID, id string) (cloud.User, error) {
	return p.change(ctx, orgID, id, "disable user", func(tx Querier, u *cloud.User) error {
		if u.Disabled() {
			return nil
		}
		if err := keepAnOwner(ctx, tx, *u, "disabled"); err != nil {
			return err
		}
		u.DisabledAt = p.Clock().UTC().Truncate(time.Millisecond)
		if _, err := tx.Exec(ctx, `UPDATE users SET disabled_at = ? WHERE id = ?`, u.DisabledAt.UnixMilli(), id); err != nil {
			return err
		}
		return p.auditMember(ctx, tx, *u, cloud.ActionMemberDisabled, map[string]any{"email": u.Email})
	})
}

// SetUserPassword stores a new password hash and ends the user's sessions
// signed in before now; the user need no longer change it.
func (p PanelStore) SetUserPassword(ctx context.Context, orgID, id, hash string) (cloud.User, error) {
	return p.setPassword(ctx, orgID, id, hash, passwordByAdmin)
}

// change reads the organization's user id in a UserTx and lets fn change
// it; ENOTFOUND without the user.
func (p PanelStore) change(ctx context.Context, orgID, id, what string, fn func(tx Querier, u *cloud.User) error) (cloud.User, error) {
	var u cloud.User
	err := p.userTx(ctx, orgID, what, func(tx Querier) error {
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
func keepAnOwner(ctx context.Context, tx Querier, u cloud.User, verb string) error {
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

// insertUser stores the new user u (active, password never changed) in tx.
func insertUser(ctx context.Context, tx Querier, u cloud.User) error {
	_, err := tx.Exec(ctx, `INSERT INTO users (`+UserColumns+`) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?)`,
		u.ID, u.OrgID, u.Email, string(u.Role), u.PasswordHash, u.CreatedAt.UnixMilli(), u.MustChangePassword)
	return err
}
