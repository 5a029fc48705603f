package cloud

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/resource"
)

// Store is one open store of the relay: a SQLite file (cloud/sqlite) or a
// PostgreSQL database (cloud/postgres). It holds the services of the public
// API and the administration every admin subcommand uses. The agent
// endpoint's, the alert engine's and the webhook outbox's stores
// (agentlink.Store, alert.Store, webhook.Store) are made from the same open
// store by its package; cloud/relay does the wiring. The shared
// store test suite (cloud/storetest) is the contract's behaviour: every
// implementation passes it.
type Store interface {
	Admin

	// Devices, Serial, Alerts and Keys are the services of the public API.
	Devices() DeviceService
	Serial() SerialService
	Alerts() AlertService
	Keys() KeyService
	// Points reads devices' points and their history.
	Points() PointService
	// Rules holds the organization's alert rules, silences and
	// notification channels.
	Rules() RuleService
	// Claims, Releases and Rollouts are fleet operations (issue 28):
	// claims for zero-touch provisioning, agent releases, rollouts and
	// the reboot command.
	Claims() ClaimService
	Releases() ReleaseService
	Rollouts() RolloutService
	// Audit reads and keeps the audit log (issue 30; cloud/audit.go).
	Audit() AuditService

	// Observe names who hears of changes made through the services:
	// config of desired serial configuration changes (PATCH /serial, PUT
	// channel), alerts of alert state changes (acknowledge, resolve, and
	// the resolutions of a rule deleted, disabled or changed).
	// Call it before the services are used; nil observers are allowed.
	Observe(config DesiredConfigObserver, alerts AlertObserver)
	// ObserveRules names who hears of rule changes made through Rules()
	// (the alert engine); call it before the services are used.
	ObserveRules(rules RulesObserver)
	// ObserveCommands names who hears that a device was given commands
	// through Rollouts() (the agent endpoint); call it before the services
	// are used.
	ObserveCommands(commands CommandsObserver)

	// Versioner returns the store's data version (see Versioner), or nil
	// when the store offers none; callers then do not cache what they
	// read.
	Versioner() Versioner

	// SweepRetention deletes metrics and events captured before now minus
	// keep and returns how many of each it deleted.
	SweepRetention(ctx context.Context, keep time.Duration) (metrics, events int64, err error)

	// Ready reports whether the store can serve: the database answers and
	// holds every migration this relay knows (readiness probes).
	Ready(ctx context.Context) error

	// Close releases the store; every service made from it stops working.
	Close() error
}

// Versioner is a cheap test of whether anything was committed to a store:
// DataVersion returns a number that grows whenever a transaction may have
// been committed since the previous call, by this process or another one
// (the admin CLI, another relay), and never goes back. Equal numbers from
// two calls mean nothing was committed in between, so what was read after
// the first call is still current; of two different numbers, the larger
// was read later (the page cache keeps only the newest version's pages).
// Caches on the request path (API key rows, list pages) tag what they keep
// with it; read the version before the data it tags, never after. The API
// reads it once per request and hands it to both caches.
type Versioner interface {
	DataVersion(ctx context.Context) (uint64, error)
}

// Admin is what the admin subcommands (org, key, device, webhook ...) do
// to a store. Methods that take an id of an organization, key, device or
// delivery answer ENOTFOUND for an unknown one.
type Admin interface {
	// CreateOrg creates an organization with a fresh webhook signing
	// secret and the default alert rules (DefaultRules).
	CreateOrg(ctx context.Context, name string) (Org, error)
	Org(ctx context.Context, id string) (Org, error)
	// ListOrgs returns every organization, oldest first.
	ListOrgs(ctx context.Context) ([]Org, error)
	// SetOrgAlertWebhook sets (or, with "", clears) the organization's
	// alert webhook URL; an invalid URL is EINVALID.
	SetOrgAlertWebhook(ctx context.Context, orgID, url string) error
	// RotateOrgSecret gives the organization a fresh signing secret and
	// returns it; during grace (0 to MaxSecretGrace) the previous one also
	// signs the Standard Webhooks header.
	RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error)

	// CreateKey makes a key (expiresIn 0: never expires) and returns it with
	// the full key string, which exists nowhere else afterwards.
	CreateKey(ctx context.Context, orgID, name string, scopes []string, expiresIn time.Duration) (*APIKey, string, error)
	// ListKeys returns the organization's keys, oldest first, revoked ones
	// included.
	ListKeys(ctx context.Context, orgID string) ([]*APIKey, error)
	// RevokeKey revokes a key (idempotent: the first time is kept); every
	// relay refuses it from its next request.
	RevokeKey(ctx context.Context, id string) (*APIKey, error)

	// AddDevice registers a device in PROVISIONING state and returns it
	// with its agent token (shown once; only its SHA-256 is kept). An
	// unknown model is EINVALID; a serial number already used in the
	// organization is ECONFLICT.
	AddDevice(ctx context.Context, nd NewDevice) (resource.DeviceDetail, string, error)
	// RevokeDevice revokes the device's token (idempotent) and returns when.
	RevokeDevice(ctx context.Context, id string) (time.Time, error)
	// DeviceOrg returns the id of the device's organization, or ENOTFOUND
	// (the admin CLI's device set, which names a device by id alone).
	DeviceOrg(ctx context.Context, id string) (string, error)
	// ClaimOrg returns the id of the claim's organization, or ENOTFOUND
	// (the admin CLI's claim revoke, which names a claim by id alone).
	ClaimOrg(ctx context.Context, id string) (string, error)
	// SetDeviceTags replaces the device's tags (CheckDeviceTags: EINVALID
	// naming "tags[i]"; stored deduplicated and sorted); ENOTFOUND for an
	// unknown id.
	SetDeviceTags(ctx context.Context, deviceID string, tags []string) error

	// WebhookDeliveries returns the organization's most recent deliveries,
	// newest first, each with its attempts.
	WebhookDeliveries(ctx context.Context, orgID string, limit int) ([]DeliveryInfo, error)
	// RedeliverWebhook queues a copy of a delivery under a new id and
	// returns that id.
	RedeliverWebhook(ctx context.Context, id string) (string, error)
	// WebhookDeliveryCounts counts the organization's deliveries by state
	// (pending, delivered, failed, exhausted); states without any are
	// absent.
	WebhookDeliveryCounts(ctx context.Context, orgID string) (map[string]int, error)
}

// NewDevice is what Admin.AddDevice needs.
type NewDevice struct {
	OrgID        string
	Name         string
	SerialNumber string
	Model        string
	Location     string
	Notes        *string
}

// DeliveryAttempt is one recorded webhook attempt, as the admin CLI shows it.
type DeliveryAttempt struct {
	Attempt    int       `json:"attempt"`
	At         time.Time `json:"at"`
	StatusCode int       `json:"statusCode,omitempty"`
	Error      string    `json:"error,omitempty"`
	DurationMs int64     `json:"durationMs"`
}

// DeliveryInfo is a webhook delivery with its attempts, as the admin CLI
// shows it.
type DeliveryInfo struct {
	Seq           int64             `json:"-"` // outbox order
	ID            string            `json:"id"`
	DeviceID      string            `json:"deviceId"`
	Event         string            `json:"event"`
	URL           string            `json:"url"`
	State         string            `json:"state"`
	Attempts      []DeliveryAttempt `json:"attempts"`
	NextAttemptAt *time.Time        `json:"nextAttemptAt,omitempty"`
	LastError     string            `json:"lastError,omitempty"` // the last attempt's error, or why it was dropped
	RedeliveryOf  string            `json:"redeliveryOf,omitempty"`
	CreatedAt     time.Time         `json:"createdAt"`
	// Kind and ChannelID are the outbox delivery's (OutboxDelivery): ""
	// for the organization's alert webhook and signal forwarding.
	Kind      string `json:"kind,omitempty"`
	ChannelID string `json:"channelId,omitempty"`
}

// MaxSecretGrace bounds the grace period of a rotated webhook secret.
const MaxSecretGrace = 7 * 24 * time.Hour

// DefaultRetention is how long metrics and events are kept by default.
const DefaultRetention = 30 * 24 * time.Hour

// WebhookSecretPrefix starts every organization's webhook signing secret.
const WebhookSecretPrefix = "whsec_"

// MaxNameLength bounds the names of organizations, keys and devices.
const MaxNameLength = 200

// ValidName trims name and checks it: not empty, at most MaxNameLength
// bytes, printable UTF-8. Errors are EINVALID naming field.
func ValidName(field, name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", Errorf(EINVALID, "%s is required", field)
	}
	if len(name) > MaxNameLength {
		return "", Errorf(EINVALID, "%s is longer than %d bytes", field, MaxNameLength)
	}
	if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return "", Errorf(EINVALID, "%s must be printable UTF-8 text", field)
	}
	return name, nil
}

// DefaultAlertRules returns the default alert rules of a new organization
// (without ids; existing organizations keep their rules' ids). They notify
// nobody until a person adds channels to them.
func DefaultAlertRules() []resource.AlertRule {
	f := func(v float64) *float64 { return &v }
	thr := func(name string, sev resource.Severity, metric string, value, clear float64, hold string) resource.AlertRule {
		return resource.AlertRule{Name: name, Enabled: true, Severity: sev, Notify: []string{}, RepeatEvery: "0s",
			Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric." + metric, Op: ">=", Value: f(value), Clear: f(clear), For: hold}}
	}
	return []resource.AlertRule{
		// Three consecutive samples at the agent's default metrics interval (5 min).
		thr("high_cpu", resource.SeverityWarning, "cpuPct", 90, 80, "10m"),
		thr("high_mem", resource.SeverityWarning, "memPct", 90, 80, "10m"),
		thr("disk_full", resource.SeverityError, "diskUsedPct", 90, 85, "0s"),
		thr("high_temp", resource.SeverityWarning, "tempCpu", 80, 75, "10m"),
		{Name: "device_offline", Enabled: true, Severity: resource.SeverityError, Notify: []string{}, RepeatEvery: "0s",
			Condition: resource.RuleCondition{Kind: resource.ConditionOffline, After: "30s"}},
		{Name: "vpn_down", Enabled: true, Severity: resource.SeverityError, Notify: []string{}, RepeatEvery: "0s",
			Condition: resource.RuleCondition{Kind: resource.ConditionEvent, Type: "alert.vpn_down", ResolveOn: "vpn.up"}},
		{Name: "device_error", Enabled: true, Severity: resource.SeverityError, Notify: []string{}, RepeatEvery: "0s",
			Condition: resource.RuleCondition{Kind: resource.ConditionStatus, Status: resource.StatusError, For: "1m"}},
	}
}
