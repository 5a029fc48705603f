package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Two-factor sign-in (cloud.TwoFactorService; migration 0019_totp): the
// secret and the last accepted time step in user_totp, the recovery codes'
// hashes in recovery_codes, the organization's requirement in orgs.

var _ cloud.TwoFactorService = PanelStore{}

// TwoFactorOf returns the organization's user's two-factor state in one
// read: enrolment, unused recovery codes, the organization's requirement.
func (p PanelStore) TwoFactorOf(ctx context.Context, orgID, userID string) (cloud.TwoFactor, error) {
	var (
		required bool
		enrolled sql.NullInt64
		left     int
	)
	err := p.R.QueryRow(ctx, `SELECT o.require_2fa,
		(SELECT t.enrolled_at FROM user_totp t WHERE t.user_id = ?),
		(SELECT COUNT(*) FROM recovery_codes r WHERE r.user_id = ? AND r.used_at IS NULL)
		FROM orgs o WHERE o.id = ? AND EXISTS (SELECT 1 FROM users u WHERE u.id = ? AND u.org_id = o.id)`,
		userID, userID, orgID, userID).Scan(&required, &enrolled, &left)
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.TwoFactor{}, UserNotFound(userID)
	}
	if err != nil {
		return cloud.TwoFactor{}, p.Wrap("two-factor state", err)
	}
	out := cloud.TwoFactor{OrgRequires: required, RecoveryLeft: left}
	if enrolled.Valid {
		out.EnrolledAt = time.UnixMilli(enrolled.Int64).UTC()
	}
	return out, nil
}

// EnrollTOTP stores the secret, its spent step and the recovery codes'
// hashes, with the record member.2fa_enrolled, in one transaction.
func (p PanelStore) EnrollTOTP(ctx context.Context, orgID, userID string, e cloud.TOTPEnrolment) error {
	if e.Secret == "" || len(e.RecoveryHashes) != cloud.RecoveryCodeCount {
		return cloud.Errorf(cloud.EINVALID, "an enrolment needs a secret and %d recovery codes", cloud.RecoveryCodeCount)
	}
	err := p.Tx(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `INSERT INTO user_totp (user_id, org_id, secret, enrolled_at, last_step)
			SELECT id, org_id, ?, ?, ? FROM users WHERE id = ? AND org_id = ?`, e.Secret, p.nowMs(), e.Step, userID, orgID)
		if p.IsUnique(err) {
			return cloud.Errorf(cloud.ECONFLICT, "two-factor sign-in is on already; turn it off first")
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return UserNotFound(userID)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM recovery_codes WHERE user_id = ?`, userID); err != nil {
			return err
		}
		for _, h := range e.RecoveryHashes {
			if _, err := tx.Exec(ctx, `INSERT INTO recovery_codes (user_id, code_hash) VALUES (?, ?)`, userID, h); err != nil {
				return err
			}
		}
		return p.audit(ctx, tx, orgID, cloud.ActionMember2FAEnrolled, cloud.AuditTarget{Kind: cloud.TargetMember, ID: userID},
			map[string]any{"method": "totp", "recoveryCodes": len(e.RecoveryHashes)})
	})
	return p.Wrap("enroll two-factor", err)
}

// TOTPSecret returns the enrolled user's secret.
func (p PanelStore) TOTPSecret(ctx context.Context, orgID, userID string) (string, error) {
	var secret string
	err := p.R.QueryRow(ctx, `SELECT secret FROM user_totp WHERE user_id = ? AND org_id = ?`, userID, orgID).Scan(&secret)
	if errors.Is(err, sql.ErrNoRows) {
		return "", cloud.Errorf(cloud.ENOTFOUND, "two-factor sign-in is off for user %q", userID)
	}
	return secret, p.Wrap("two-factor secret", err)
}

// UseTOTPStep moves the last accepted step forward to step, only when it
// lies before it: the one statement decides between relays racing with
// the same code.
func (p PanelStore) UseTOTPStep(ctx context.Context, orgID, userID string, step int64) (bool, error) {
	n, err := p.W.Exec(ctx, `UPDATE user_totp SET last_step = ? WHERE user_id = ? AND org_id = ? AND last_step < ?`, step, userID, orgID, step)
	if err != nil {
		return false, p.Wrap("use code", err)
	}
	return n == 1, nil
}

// UseRecoveryCode marks the unused code of hash used, in one statement.
func (p PanelStore) UseRecoveryCode(ctx context.Context, orgID, userID, hash string) (bool, error) {
	n, err := p.W.Exec(ctx, `UPDATE recovery_codes SET used_at = ? WHERE user_id = ? AND code_hash = ? AND used_at IS NULL
		AND user_id IN (SELECT id FROM users WHERE id = ? AND org_id = ?)`, p.nowMs(), userID, hash, userID, orgID)
	if err != nil {
		return false, p.Wrap("use recovery code", err)
	}
	return n == 1, nil
}

// ResetTwoFactor deletes the user's secret and recovery codes, with the
// record member.2fa_reset when there was a secret.
func (p PanelStore) ResetTwoFactor(ctx context.Context, orgID, userID string) (bool, error) {
	var was bool
	err := p.Tx(ctx, func(tx Querier) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM users WHERE id = ? AND org_id = ?`, userID, orgID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return UserNotFound(userID)
		}
		gone, err := tx.Exec(ctx, `DELETE FROM user_totp WHERE user_id = ?`, userID)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM recovery_codes WHERE user_id = ?`, userID); err != nil {
			return err
		}
		if was = gone > 0; !was {
			return nil
		}
		return p.audit(ctx, tx, orgID, cloud.ActionMember2FAReset, cloud.AuditTarget{Kind: cloud.TargetMember, ID: userID}, nil)
	})
	return was, p.Wrap("reset two-factor", err)
}

// SetOrgRequire2FA sets the organization's requirement, with the record
// org.2fa_required_set (from, to) when it changed.
func (p PanelStore) SetOrgRequire2FA(ctx context.Context, orgID string, required bool) error {
	err := p.Tx(ctx, func(tx Querier) error {
		var was bool
		err := tx.QueryRow(ctx, `SELECT require_2fa FROM orgs WHERE id = ?`+p.LockRows, orgID).Scan(&was)
		if errors.Is(err, sql.ErrNoRows) {
			return OrgNotFound(orgID)
		}
		if err != nil || was == required {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE orgs SET require_2fa = ? WHERE id = ?`, required, orgID); err != nil {
			return err
		}
		return p.audit(ctx, tx, orgID, cloud.ActionOrg2FA, cloud.AuditTarget{Kind: cloud.TargetOrg},
			map[string]bool{"from": was, "to": required})
	})
	return p.Wrap("require two-factor", err)
}
