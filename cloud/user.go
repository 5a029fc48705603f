package cloud

import (
	"context"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Role is a panel user's role in their organization.
type Role string

// Roles, most powerful first. docs/panel.md has the matrix.
const (
	RoleOwner  Role = "OWNER"  // everything, members and roles included
	RoleAdmin  Role = "ADMIN"  // API keys, webhooks, channel config, alerts
	RoleMember Role = "MEMBER" // channel config, alerts
	RoleViewer Role = "VIEWER" // read only
)

// Roles lists every role, most powerful first.
var Roles = []Role{RoleOwner, RoleAdmin, RoleMember, RoleViewer}

// ParseRole returns the role named s (case-insensitive), or EINVALID.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToUpper(strings.TrimSpace(s)))
	for _, v := range Roles {
		if r == v {
			return r, nil
		}
	}
	return "", Errorf(EINVALID, "role must be one of OWNER, ADMIN, MEMBER, VIEWER (got %q)", s)
}

// Permission is something a role may do in the panel.
type Permission string

// Permissions, one per kind of page or action.
const (
	PermView      Permission = "view"      // fleet, devices, events, channels, alerts
	PermConfigure Permission = "configure" // channel config, mode, forwarding
	PermAlerts    Permission = "alerts"    // acknowledge and resolve alerts, create and end silences
	PermKeys      Permission = "keys"      // create, list and revoke API keys
	PermWebhooks  Permission = "webhooks"  // alert URL, secret rotation, deliveries
	PermMembers   Permission = "members"   // add members, change roles, disable
	PermRules     Permission = "rules"     // alert rules and notification channels
	// PermOperations is fleet operations (issue 28): claims, agent
	// releases and rollouts.
	PermOperations Permission = "operations"
	// PermAudit is reading the audit log (issue 30): Settings → Audit log
	// and its CSV export.
	PermAudit Permission = "audit"
)

// Permissions lists every permission in the order docs/panel.md shows them.
var Permissions = []Permission{PermView, PermConfigure, PermAlerts, PermKeys, PermWebhooks, PermMembers, PermRules, PermOperations, PermAudit}

// rolePermissions is the matrix of docs/panel.md.
var rolePermissions = map[Role][]Permission{
	RoleOwner:  {PermView, PermConfigure, PermAlerts, PermKeys, PermWebhooks, PermMembers, PermRules, PermOperations, PermAudit},
	RoleAdmin:  {PermView, PermConfigure, PermAlerts, PermKeys, PermWebhooks, PermRules, PermOperations, PermAudit},
	RoleMember: {PermView, PermConfigure, PermAlerts},
	RoleViewer: {PermView},
}

// Can reports whether role r holds permission p.
func (r Role) Can(p Permission) bool {
	for _, q := range rolePermissions[r] {
		if q == p {
			return true
		}
	}
	return false
}

// MaxEmailLength bounds a user's email address.
const MaxEmailLength = 254

// User is a person's account in one organization, with which they sign in
// to the panel. Email is stored lower-cased and unique in the organization;
// one person may hold an account with the same email in several
// organizations (sign-in then asks which, when the password fits more
// than one).
type User struct {
	ID           string
	OrgID        string
	Email        string
	Role         Role
	PasswordHash string    // argon2id, PHC string format (package password)
	DisabledAt   time.Time // zero: active
	// PasswordChangedAt ends every session signed in before it; zero when
	// the password was never changed.
	PasswordChangedAt time.Time
	// MustChangePassword: the password was set by someone else (an OWNER
	// adding the member, the admin CLI with --temporary) and the user must
	// choose their own before anything else in the panel.
	MustChangePassword bool
	CreatedAt          time.Time
}

// Disabled reports whether the user may no longer sign in.
func (u User) Disabled() bool { return !u.DisabledAt.IsZero() }

// NewUser is what CreateUser needs; PasswordHash is already made.
type NewUser struct {
	OrgID        string
	Email        string
	Role         Role
	PasswordHash string
	// MustChangePassword sets User's: a temporary password.
	MustChangePassword bool
}

// MaxAccountsPerEmail bounds the accounts that password sign-in looks at
// for one email (UsersByEmail): a person in more organizations than that
// signs in to the rest with single sign-on. Sign-in checks the password
// against exactly this many hashes whatever the count, so that its time
// tells nothing about it.
const MaxAccountsPerEmail = 5

// OrgUser is an account with its organization's name (sign-in's choice of
// organization shows it).
type OrgUser struct {
	User
	OrgName string
}

// UserService stores the panel's users. Methods that take an orgID act only
// on that organization's users: another organization's user is ENOTFOUND.
// The last active OWNER of an organization can be neither demoted nor
// disabled (ECONFLICT), checked in the same transaction as the change.
type UserService interface {
	CreateUser(ctx context.Context, u NewUser) (User, error)
	// UserByID returns the user with id in any organization (sessions and
	// the admin CLI), or ENOTFOUND.
	UserByID(ctx context.Context, id string) (User, error)
	// UsersByEmail returns the accounts with email (any case) in every
	// organization, active ones first, then oldest first, at most limit
	// (1..MaxAccountsPerEmail); none is no error (password sign-in).
	UsersByEmail(ctx context.Context, email string, limit int) ([]OrgUser, error)
	// UserByOrgEmail returns the organization's user with email (any
	// case), or ENOTFOUND (single sign-on, Add member).
	UserByOrgEmail(ctx context.Context, orgID, email string) (User, error)
	// ListUsers returns the organization's users, oldest first.
	ListUsers(ctx context.Context, orgID string) ([]User, error)
	SetUserRole(ctx context.Context, orgID, id string, role Role) (User, error)
	DisableUser(ctx context.Context, orgID, id string) (User, error)
	// SetUserPassword stores a new hash and sets PasswordChangedAt, which
	// ends the user's other sessions; it clears MustChangePassword.
	SetUserPassword(ctx context.Context, orgID, id, hash string) (User, error)
	// SetTemporaryPassword is SetUserPassword for a password chosen by
	// someone else: the user must change it at their next sign-in.
	SetTemporaryPassword(ctx context.Context, orgID, id, hash string) (User, error)
	// ChangeOwnPassword is SetUserPassword by the user themself (ctx's
	// actor; the audit record says "by": "self").
	ChangeOwnPassword(ctx context.Context, orgID, id, hash string) (User, error)
}

// SessionStore keeps the panel's sessions (opaque data under the SHA-256 of
// the session token, with an expiry). Find does not return an expired
// session. It is the store behind the panel's session manager.
type SessionStore interface {
	FindSession(ctx context.Context, tokenHash string) (data []byte, found bool, err error)
	// CommitSession inserts or replaces the session.
	CommitSession(ctx context.Context, tokenHash string, data []byte, expiry time.Time) error
	DeleteSession(ctx context.Context, tokenHash string) error
	// DeleteExpiredSessions removes sessions expired before now.
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error)
}

// NewKey is a key to create on behalf of a panel user.
type NewKey struct {
	OrgID  string
	Name   string
	Scopes []string
	// ExpiresIn 0 means never.
	ExpiresIn time.Duration
	// CreatedBy is the id of the user creating it ("" for the admin CLI).
	CreatedBy string
}

// KeyInfo is an API key as its organization's list shows it.
type KeyInfo struct {
	APIKey
	// CreatedByEmail is the creator's email, "" when made with the CLI.
	CreatedByEmail string
	// LastUsedAt is when the key last authenticated a request (to within
	// KeyUseResolution); zero: never.
	LastUsedAt time.Time
}

// KeyUseResolution is how stale a key's recorded last use may be: the
// relay records a key's use at most once per this period.
const KeyUseResolution = time.Minute

// KeyAdmin is what the panel's API keys page needs. Every method is scoped
// to orgID.
type KeyAdmin interface {
	// CreateOrgKey makes a key and returns it with the full key string,
	// which exists nowhere else afterwards.
	CreateOrgKey(ctx context.Context, k NewKey) (*APIKey, string, error)
	// OrgKeys lists the organization's keys, newest first, revoked ones
	// included.
	OrgKeys(ctx context.Context, orgID string) ([]KeyInfo, error)
	// RevokeOrgKey revokes the organization's key id (idempotent).
	RevokeOrgKey(ctx context.Context, orgID, id string) (*APIKey, error)
}

// KeyUseRecorder records that a key authenticated a request at a time.
// The apikey Authenticator calls it at most once per KeyUseResolution per
// key.
type KeyUseRecorder interface {
	RecordKeyUse(ctx context.Context, id string, at time.Time) error
}

// DeviceSearch selects a page of the panel's device table: Query matches
// name, serial number, location or model (case-insensitive substring);
// Tags keeps the devices holding every one of them (each a TagPattern);
// Offset counts devices skipped, oldest first.
type DeviceSearch struct {
	Status resource.DeviceStatus // "" for any
	Query  string
	Tags   []string
	Offset int
	Limit  int
	// Sort orders the devices (SortDefault: oldest first).
	Sort DeviceSort
}

// DevicePage is one page of the panel's device table.
type DevicePage struct {
	Devices []resource.Device
	// Total counts the devices matching the search, on every page.
	Total int
}

// FleetView is what the panel's fleet page reads.
type FleetView interface {
	// StatusCounts counts the organization's devices by status.
	StatusCounts(ctx context.Context, orgID string) (map[resource.DeviceStatus]int, error)
	SearchDevices(ctx context.Context, orgID string, s DeviceSearch) (DevicePage, error)
}

// NormalizeEmail returns email trimmed and lower-cased, or EINVALID when it
// is not a plain address (local@domain, no name, no spaces).
func NormalizeEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	if e == "" {
		return "", Errorf(EINVALID, "email is required")
	}
	if len(e) > MaxEmailLength {
		return "", Errorf(EINVALID, "email is longer than %d bytes", MaxEmailLength)
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" || strings.ContainsAny(e, " \t\r\n\"<>") {
		return "", Errorf(EINVALID, "email %q is not an address like name@example.com", email)
	}
	return e, nil
}

// WebhookSettings is an organization's alert webhook as Settings → Webhooks
// shows it.
type WebhookSettings struct {
	AlertURL string
	Secret   string // the current signing secret (whsec_...)
	// PreviousValidUntil is when the secret before the last rotation stops
	// signing; zero when it no longer does.
	PreviousValidUntil time.Time
}

// DeliverySummary is one webhook delivery in the panel's delivery log.
type DeliverySummary struct {
	Seq                             int64 // outbox order: the log's cursor
	ID, DeviceID, Event, URL, State string
	Attempts                        int
	LastStatus                      int    // the last attempt's HTTP status, 0 for none
	LastError                       string // the last attempt's error, or why it was dropped
	RedeliveryOf                    string
	CreatedAt                       time.Time
	Kind, ChannelID                 string // OutboxDelivery's: "" for the alert webhook and signal forwarding
}

// WebhookAdmin is what Settings → Webhooks reads and changes. Every method
// is scoped to orgID: another organization's delivery is ENOTFOUND.
type WebhookAdmin interface {
	WebhookSettings(ctx context.Context, orgID string) (WebhookSettings, error)
	// SetOrgAlertWebhook sets or, with "", clears the alert webhook URL.
	SetOrgAlertWebhook(ctx context.Context, orgID, url string) error
	// RotateOrgSecret makes a new signing secret and returns it; the old
	// one also signs for grace.
	RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error)
	// RecentDeliveries returns the newest deliveries first.
	RecentDeliveries(ctx context.Context, orgID string, limit int) ([]DeliverySummary, error)
	// DeliveryLog returns one page of the deliveries f selects, newest
	// first (EINVALID for a filter DeliveryFilter.Check refuses).
	DeliveryLog(ctx context.Context, orgID string, f DeliveryFilter) (DeliveryLogPage, error)
	// RedeliverOrgWebhook queues a copy of delivery id and returns its id.
	RedeliverOrgWebhook(ctx context.Context, orgID, id string) (string, error)
}

// PanelStore is what the panel and the user subcommands need from a store
// beside Store: users, sessions, the fleet page's reads (its devices at a
// glance included), API keys with
// their creator and last use, the webhook settings and two-factor
// sign-in. Each store package
// provides one for its open store (the shared suite in cloud/storetest
// holds its behaviour).
type PanelStore interface {
	UserService
	SessionStore
	FleetView
	FleetGlance
	KeyAdmin
	WebhookAdmin
	TwoFactorService
	OIDCService
	LiveReader
}

// SummarizeDeliveries turns the admin log's deliveries into the panel's
// summaries: attempts counted, the last attempt's status and error.
func SummarizeDeliveries(ds []DeliveryInfo) []DeliverySummary {
	out := make([]DeliverySummary, 0, len(ds))
	for _, d := range ds {
		sum := DeliverySummary{Seq: d.Seq, ID: d.ID, DeviceID: d.DeviceID, Event: d.Event, URL: d.URL, State: d.State,
			Attempts: len(d.Attempts), LastError: d.LastError, RedeliveryOf: d.RedeliveryOf, CreatedAt: d.CreatedAt,
			Kind: d.Kind, ChannelID: d.ChannelID}
		if n := len(d.Attempts); n > 0 {
			sum.LastStatus = d.Attempts[n-1].StatusCode
			if d.Attempts[n-1].Error != "" {
				sum.LastError = d.Attempts[n-1].Error
			}
		}
		out = append(out, sum)
	}
	return out
}

// Page sizes and bounds of DeliveryLog.
const (
	DefaultDeliveryPage = 50
	MaxDeliveryPage     = 200
	MaxDeliveryEvent    = 64 // the length of an event filter
)

// DeliveryStates are the states a delivery can be in, in the order people
// read them.
var DeliveryStates = []DeliveryState{DeliveryPending, DeliveryDelivered, DeliveryFailed, DeliveryExhausted}

// DeliveryFilter selects a page of an organization's delivery log: every
// field that is set must match. Before pages to older deliveries (Seq
// below it), After to newer ones (Seq above it); at most one is set, and
// neither means the newest page.
type DeliveryFilter struct {
	State         DeliveryState // "" for any, else one of DeliveryStates
	Event         string        // "" for any, else an event name (alert.opened)
	DeviceID      string        // "" for any
	Before, After int64
	Limit         int // 1..MaxDeliveryPage; 0 is DefaultDeliveryPage
}

// Check refuses a filter that cannot select anything sensible (EINVALID,
// naming the field), and makes Limit 0 DefaultDeliveryPage.
func (f *DeliveryFilter) Check() error {
	switch {
	case f.State != "" && !slices.Contains(DeliveryStates, f.State):
		return Errorf(EINVALID, "state: choose pending, delivered, failed or exhausted")
	case len(f.Event) > MaxDeliveryEvent || !eventName.MatchString(f.Event):
		return Errorf(EINVALID, "event: an event name such as alert.opened (at most %d characters)", MaxDeliveryEvent)
	case f.DeviceID != "" && !ids.Valid(f.DeviceID):
		return Errorf(EINVALID, "device: not a device id")
	case f.Before < 0 || f.After < 0 || f.Before > 0 && f.After > 0:
		return Errorf(ECURSOR, "the page link is not valid: start from the newest deliveries")
	case f.Limit < 0 || f.Limit > MaxDeliveryPage:
		return Errorf(EINVALID, "limit: 1 to %d", MaxDeliveryPage)
	}
	if f.Limit == 0 {
		f.Limit = DefaultDeliveryPage
	}
	return nil
}

// eventName is what an event filter may hold ("" for any).
var eventName = regexp.MustCompile(`^(?:[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)?$`)

// DeliveryLogPage is one page of the delivery log, newest first. Newer and
// Older are the cursors of the pages beside it (DeliveryFilter's After and
// Before), 0 where there is none.
type DeliveryLogPage struct {
	Deliveries   []DeliverySummary
	Newer, Older int64
}

// LikePattern turns a device search into a lower-cased SQL LIKE pattern
// matching it anywhere ("" for an empty search), with \ escaping % and _
// (both stores use it with ESCAPE '\').
func LikePattern(q string) string {
	q = strings.ToLower(strings.TrimSpace(q))
	if q == "" {
		return ""
	}
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(q) + "%"
}
