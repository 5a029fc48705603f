package cloud

import (
	"context"
	"encoding/json"
	"time"
)

// The audit log (issue 30): every change made through a door people use
// (the public API with a key, the panel as a user, the admin CLI) is one
// append-only record, written by the store in the same transaction as the
// change it records, so that no change is ever without its record. The
// door names who acts by putting an Actor in the request's context
// (WithActor); the store's write of a change reads it (ActorFrom). A
// change made with no actor in its context is the system's own (the agent
// endpoint, the alert engine, the rollout engine, retention) and has no
// record. Records are never changed or deleted through any route; only
// the retention sweep (SweepAudit, --audit-retention) removes the old.

// ActorKind says through which door a change came.
type ActorKind string

// Actor kinds (DESIGN.md "Identity and audit").
const (
	ActorUser   ActorKind = "user"    // a panel user: ID is the user's id, Name the email
	ActorAPIKey ActorKind = "api_key" // an API key: ID is the key's id, Name the key's name
	ActorCLI    ActorKind = "cli"     // the admin CLI: ID is the OS user's name, Name "user@host"
)

// Actor is who makes a change. IP is the client's address (the API's and
// the panel's clientaddr.Host; "" for the CLI); it is the record's "ip".
type Actor struct {
	Kind ActorKind `json:"kind"`
	ID   string    `json:"id"`
	Name string    `json:"name"`
	IP   string    `json:"-"`
}

type actorKey struct{}

// WithActor returns ctx carrying a: the store records every change made
// with it as a's.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries, if any.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// AuditTarget is what a change was made to: Kind is one of the Target*
// constants, ID its id ("" when the kind names the organization itself).
type AuditTarget struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// Target kinds.
const (
	TargetOrg                 = "org"
	TargetKey                 = "api_key"
	TargetMember              = "member"
	TargetDevice              = "device"
	TargetChannel             = "channel" // ID: "<device id>/<channel id>"
	TargetSerial              = "serial"  // ID: the device's id
	TargetAlert               = "alert"
	TargetRule                = "rule"
	TargetSilence             = "silence"
	TargetNotificationChannel = "notification_channel"
	TargetClaim               = "claim"
	TargetRelease             = "release"
	TargetRollout             = "rollout"
	TargetCommand             = "command" // a reboot: ID is the command's id
	TargetDelivery            = "webhook_delivery"
)

// Audit actions: "<target>.<past participle>". A new kind of change adds
// its action here, with its record written in the change's transaction.
const (
	ActionSignedIn      = "session.signed_in"
	ActionSignedOut     = "session.signed_out"
	ActionSignInFailed  = "session.sign_in_failed" // a wrong password or code for a known account
	ActionOrgCreated    = "org.created"
	ActionAlertWebhook  = "org.alert_webhook_set"
	ActionSecretRotated = "org.webhook_secret_rotated"
	ActionOrg2FA        = "org.2fa_required_set"
	ActionOrgOIDC       = "org.oidc_set"

	ActionKeyCreated = "key.created"
	ActionKeyRevoked = "key.revoked"

	ActionMemberAdded       = "member.added"
	ActionMemberRoleChanged = "member.role_changed"
	ActionMemberDisabled    = "member.disabled"
	ActionMemberPassword    = "member.password_changed" // by the member, or set by the CLI (details say)
	ActionMember2FAEnrolled = "member.2fa_enrolled"
	ActionMember2FAReset    = "member.2fa_reset"

	ActionDeviceAdded   = "device.added"
	ActionDeviceUpdated = "device.updated" // name, location, notes, tags (details: the fields set)
	ActionDeviceRevoked = "device.revoked"
	ActionDeviceClaimed = "device.claimed" // actor: who created the claim; ip: the agent's
	ActionDeviceReboot  = "device.reboot_requested"

	ActionSerialUpdated     = "serial.updated" // mode, forwarding, enabled (details: from and to)
	ActionChannelConfigured = "channel.configured"
	ActionPointsImported    = "channel.points_imported" // a DBC import

	ActionAlertAcknowledged = "alert.acknowledged"
	ActionAlertResolved     = "alert.resolved"

	ActionRuleCreated = "rule.created"
	ActionRuleUpdated = "rule.updated"
	ActionRuleDeleted = "rule.deleted"

	ActionSilenceCreated = "silence.created"
	ActionSilenceDeleted = "silence.deleted"

	ActionNotifyCreated = "notification_channel.created"
	ActionNotifyRemoved = "notification_channel.removed"

	ActionClaimCreated     = "claim.created"
	ActionClaimRevoked     = "claim.revoked"
	ActionReleaseAdded     = "release.added"
	ActionRolloutCreated   = "rollout.created"
	ActionRolloutChanged   = "rollout.updated" // paused, resumed, aborted (details: the action)
	ActionWebhookRedeliver = "webhook.redelivered"
)

// AuditRecord is one record of the audit log, as the panel, the CLI
// (--json) and the CSV export show it (DESIGN.md's shape).
type AuditRecord struct {
	ID     string      `json:"id"`
	OrgID  string      `json:"-"`
	At     time.Time   `json:"at"` // milliseconds, UTC
	Actor  Actor       `json:"actor"`
	Action string      `json:"action"`
	Target AuditTarget `json:"target"`
	IP     string      `json:"ip"`
	// Details is a JSON object (never a secret: no password, key, token,
	// webhook or chat URL path); "{}" when there is nothing to add.
	Details json.RawMessage `json:"details"`
}

// MaxAuditDetails bounds a record's details: a larger object is stored as
// {"truncated":true}.
const MaxAuditDetails = 8 << 10

// DefaultAuditRetention is how long audit records are kept by default
// (--audit-retention).
const DefaultAuditRetention = 365 * 24 * time.Hour

// AuditFilter selects records of one organization, newest first: zero
// fields select everything. Action matches exactly, or every action of a
// target kind when it ends with "." ("key."). Cursor is a page's Next.
type AuditFilter struct {
	Since, Until time.Time // Since inclusive, Until exclusive
	ActorKind    ActorKind
	ActorID      string
	Action       string
	TargetKind   string
	TargetID     string
	Cursor       string
	Limit        int // 1..MaxAuditPage; 0: DefaultAuditPage
}

// Page sizes of ListAudit.
const (
	DefaultAuditPage = 50
	MaxAuditPage     = 1000
)

// AuditPage is one page of records; Next is "" on the last.
type AuditPage struct {
	Records []AuditRecord
	Next    string
}

// AuditService reads and keeps the audit log. Writes of changes are the
// store's own, in each change's transaction; RecordAudit is for what is
// no change of the store (a sign-in, a sign-out, a failed sign-in).
type AuditService interface {
	// ListAudit returns a page of the organization's records, newest
	// first (at, then id); a bad cursor or filter is EINVALID.
	ListAudit(ctx context.Context, orgID string, f AuditFilter) (AuditPage, error)
	// RecordAudit writes one record of ctx's actor (no actor: nothing is
	// written). details is marshalled to a JSON object.
	RecordAudit(ctx context.Context, orgID, action string, target AuditTarget, details any) error
	// SweepAudit deletes records older than before and returns how many.
	SweepAudit(ctx context.Context, before time.Time) (int64, error)
}
