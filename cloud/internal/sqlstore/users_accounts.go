package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Accounts (issue 30): an email is unique in its organization only, so
// password sign-in reads every organization's account with it; a password
// set by someone else is temporary until its user chooses their own.

// UsersByEmail returns the accounts with email (any case) across the
// organizations, with their organization's name: active ones first, then
// oldest first, at most limit (clamped to 1..cloud.MaxAccountsPerEmail).
// An email that is no address has none.
func (p PanelStore) UsersByEmail(ctx context.Context, email string, limit int) ([]cloud.OrgUser, error) {
	e, err := cloud.NormalizeEmail(email)
	if err != nil {
		return nil, nil
	}
	limit = min(max(limit, 1), cloud.MaxAccountsPerEmail)
	out, err := Collect(ctx, p.R, func(r Row) (cloud.OrgUser, error) {
		var ou cloud.OrgUser
		u, err := ScanUser(orgNameRow{r, &ou.OrgName})
		ou.User = u
		return ou, err
	}, `SELECT `+UserColumns+`, (SELECT name FROM orgs WHERE orgs.id = users.org_id) FROM users
		WHERE email = ? ORDER BY (disabled_at IS NOT NULL), created_at, id LIMIT ?`, e, limit)
	return out, p.Wrap("users by email", err)
}

// orgNameRow scans a row of UserColumns and the organization's name after
// them.
type orgNameRow struct {
	Row
	name *string
}

func (r orgNameRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.name)...) }

// SetTemporaryPassword stores a password chosen by someone else (the admin
// CLI's --temporary): it ends the user's sessions and they must change it
// at their next sign-in.
func (p PanelStore) SetTemporaryPassword(ctx context.Context, orgID, id, hash string) (cloud.User, error) {
	return p.setPassword(ctx, orgID, id, hash, passwordTemporary)
}

// ChangeOwnPassword stores the password the user chose themself (the
// panel's Account page): it ends their sessions signed in before now and
// clears MustChangePassword.
func (p PanelStore) ChangeOwnPassword(ctx context.Context, orgID, id, hash string) (cloud.User, error) {
	return p.setPassword(ctx, orgID, id, hash, passwordBySelf)
}

// passwordSetter says who sets a password: the user, or someone else with
// or without a change required.
type passwordSetter int

const (
	passwordByAdmin passwordSetter = iota
	passwordTemporary
	passwordBySelf
)

// setPassword stores hash for the organization's user id, sets
// PasswordChangedAt (which ends their sessions signed in before it) and
// MustChangePassword (only for a temporary password), and writes the
// audit record member.password_changed in the same transaction: details
// are the member's email and by whom, "self" or the actor's kind ("cli"),
// with "temporary": true for a temporary password; never the password.
func (p PanelStore) setPassword(ctx context.Context, orgID, id, hash string, by passwordSetter) (cloud.User, error) {
	if hash == "" {
		return cloud.User{}, cloud.Errorf(cloud.EINVALID, "password is required")
	}
	return p.change(ctx, orgID, id, "set password", func(tx Querier, u *cloud.User) error {
		u.PasswordHash = hash
		u.PasswordChangedAt = p.Clock().UTC().Truncate(time.Millisecond)
		u.MustChangePassword = by == passwordTemporary
		if _, err := tx.Exec(ctx, `UPDATE users SET password_hash = ?, password_changed_at = ?, must_change_password = ? WHERE id = ?`,
			hash, u.PasswordChangedAt.UnixMilli(), u.MustChangePassword, id); err != nil {
			return err
		}
		details := map[string]any{"email": u.Email, "by": "self"}
		if a, _ := cloud.ActorFrom(ctx); by != passwordBySelf && (a.Kind != cloud.ActorUser || a.ID != id) {
			details["by"] = string(a.Kind) // "cli": fleet-relay user reset-password
		}
		if u.MustChangePassword {
			details["temporary"] = true
		}
		return p.audit(ctx, tx, orgID, cloud.ActionMemberPassword, cloud.AuditTarget{Kind: cloud.TargetMember, ID: id}, details)
	})
}
