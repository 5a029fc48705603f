package cloud

import (
	"context"
	"time"
)

// Two-factor sign-in (issue 30, docs/identity.md): a panel user may add a
// TOTP authenticator (RFC 6238) to their password, with ten one-time
// recovery codes; an OWNER may require it for the organization. The store
// keeps the secret (it never leaves the store but to check a code), the
// last time step a code was accepted at (a code is accepted once: a step
// at or before it is refused, whichever relay checks), and the recovery
// codes' hashes (the panel makes and checks codes; the store never sees a
// recovery code itself).

// RecoveryCodeCount is how many one-time recovery codes an enrolment
// makes.
const RecoveryCodeCount = 10

// TwoFactor is a user's two-factor state as the panel shows it: never the
// secret.
type TwoFactor struct {
	// EnrolledAt is when the user turned two-factor sign-in on; zero: off.
	EnrolledAt time.Time
	// RecoveryLeft counts the unused recovery codes.
	RecoveryLeft int
	// OrgRequires says that the user's organization requires two-factor
	// sign-in of every member.
	OrgRequires bool
}

// Enrolled reports whether the user signs in with a second factor.
func (t TwoFactor) Enrolled() bool { return !t.EnrolledAt.IsZero() }

// TOTPEnrolment is what EnrollTOTP stores: the secret (base32, as the
// authenticator has it), the time step of the code that confirmed it
// (spent: that code cannot sign in), and the hashes of the recovery codes.
type TOTPEnrolment struct {
	Secret         string
	Step           int64
	RecoveryHashes []string
}

// TwoFactorService keeps two-factor sign-in. Every method acts on the
// organization's user only: another organization's is ENOTFOUND.
type TwoFactorService interface {
	// TwoFactorOf returns the user's state (the panel reads it on every
	// request of an organization that requires two-factor sign-in).
	TwoFactorOf(ctx context.Context, orgID, userID string) (TwoFactor, error)
	// EnrollTOTP turns two-factor sign-in on; ECONFLICT when it is on
	// already. Its audit record is member.2fa_enrolled.
	EnrollTOTP(ctx context.Context, orgID, userID string, e TOTPEnrolment) error
	// TOTPSecret returns an enrolled user's secret, to check a code with;
	// ENOTFOUND when two-factor sign-in is off.
	TOTPSecret(ctx context.Context, orgID, userID string) (string, error)
	// UseTOTPStep spends the time step of a correct code: false when a
	// code of that step or a later one was accepted already (a replay),
	// decided in one statement whichever relay asks.
	UseTOTPStep(ctx context.Context, orgID, userID string, step int64) (bool, error)
	// UseRecoveryCode spends the unused recovery code of that hash: false
	// when there is none (wrong, or used already), decided in one
	// statement.
	UseRecoveryCode(ctx context.Context, orgID, userID, hash string) (bool, error)
	// ResetTwoFactor turns two-factor sign-in off: the secret and the
	// recovery codes are deleted. It reports whether it was on; its audit
	// record (when it was) is member.2fa_reset.
	ResetTwoFactor(ctx context.Context, orgID, userID string) (bool, error)
	// SetOrgRequire2FA sets whether the organization requires two-factor
	// sign-in; its audit record (when it changed) is org.2fa_required_set
	// with from and to.
	SetOrgRequire2FA(ctx context.Context, orgID string, required bool) error
}
