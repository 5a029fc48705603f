package cloud

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// AlertRuleState is a device's state for one rule.
type AlertRuleState struct {
	OpenID       string    // the open (ACTIVE or ACKNOWLEDGED) alert; "" when none
	LastResolved time.Time // when the last alert of the rule resolved; zero when never
}

// DeviceAlertState is what the alert engine keeps of a device between
// samples, read from the store when it first sees the device and again
// after a while: its tags (rule scopes), status, and state per rule id.
type DeviceAlertState struct {
	Tags   []string
	Status resource.DeviceStatus
	Rules  map[string]AlertRuleState
}

// RuleSample is one value of a threshold rule's source.
type RuleSample struct {
	At    time.Time
	Value float64
}

// StatusDevice is a device in a status a status rule watches.
type StatusDevice struct {
	Device DeviceRef
	Status resource.DeviceStatus
	Since  time.Time // when the device entered Status
	Tags   []string
}

// AlertOpening is an alert to open.
type AlertOpening struct {
	OrgID    string
	DeviceID string
	Rule     AlertRule
	Message  string
	Payload  json.RawMessage
	At       time.Time
	// WithEvent stores the alert.<rule> device event with the alert; false
	// when the agent's event already is that event (vpn_down).
	WithEvent bool
	// LastSeen, for device_offline, is the device's last heartbeat as the
	// sweep read it: the alert opens only if the device is still OFFLINE
	// with no heartbeat since. A device back in between (the engine told of
	// it found nothing to resolve yet) would otherwise keep an ACTIVE alert
	// while it is online.
	LastSeen time.Time
	// AlertID, when set, is the id of the alert to open (else the store
	// makes one).
	AlertID string
}

// AlertEngineStore is what the alert engine (cloud/alert) needs from the
// relay's store. Every change it makes (open, resolve, remind) writes the
// alert's notifications to the outbox in the same transaction (the
// organization's alert webhook, and the rule's notification channels
// unless a silence covers the device or the alert is below a channel's
// minSeverity), so that a relay dying after the commit loses none and sends
// none twice.
type AlertEngineStore interface {
	// Rules returns the organization's rules, enabled or not (not the
	// deleted ones).
	Rules(ctx context.Context, orgID string) ([]AlertRule, error)
	// DeviceAlerts returns the device's tags, status and state per rule id.
	DeviceAlerts(ctx context.Context, orgID, deviceID string) (DeviceAlertState, error)
	// History returns the values of a threshold condition's source (a
	// metric, or a point's good samples) for the device captured in
	// [from, to], ascending, at most limit (the newest limit when more).
	History(ctx context.Context, orgID, deviceID string, c RuleCondition, from, to time.Time, limit int) ([]RuleSample, error)
	// OpenAlert stores an ACTIVE alert (and its alert event when
	// o.WithEvent) with its notifications; opened is false when one is
	// already open. When o.LastSeen is set (offline rules) it also opens
	// nothing when the device is no longer OFFLINE with that last
	// heartbeat, when an alert of the rule was created since that last
	// heartbeat, or when the device reported REBOOTING or UPDATING less than
	// PlannedWorkHold ago (all checked in the same transaction, ordered with
	// the device's hello).
	OpenAlert(ctx context.Context, o AlertOpening) (a resource.Alert, opened bool, err error)
	// ResolveAlert resolves the device's open alert of the rule and stores
	// an alert.resolved event with message, and its notifications;
	// resolved is false when none was open.
	ResolveAlert(ctx context.Context, orgID, deviceID string, rule AlertRule, message string, at time.Time) (a resource.Alert, resolved bool, err error)
	// OpenAlertID returns the id of the device's open alert of the rule, or
	// "" (a read: resolving checks it first).
	OpenAlertID(ctx context.Context, deviceID, ruleID string) (string, error)
	// OfflineDevices returns up to limit devices (all, or only deviceID when
	// not ""), ordered by id after cursor (an id, "" first), that are
	// OFFLINE with no heartbeat for three heartbeat intervals at now.
	OfflineDevices(ctx context.Context, now time.Time, deviceID, cursor string, limit int) ([]OfflineDevice, error)
	// StatusDevices returns up to limit devices in one of statuses,
	// ordered by id after cursor.
	StatusDevices(ctx context.Context, statuses []resource.DeviceStatus, cursor string, limit int) ([]StatusDevice, error)
	// Remind re-notifies, each in its own transaction, up to limit ACTIVE
	// (not acknowledged) alerts whose rule has a repeat interval and that
	// last notified at least that long before now, and returns how many.
	Remind(ctx context.Context, now time.Time, limit int) (int, error)
}

// OfflineDevice is a device that has been silent for three heartbeat intervals.
type OfflineDevice struct {
	Device    DeviceRef
	LastSeen  time.Time
	Heartbeat time.Duration
	Tags      []string
	// PlannedAt is when the device last reported REBOOTING or UPDATING
	// (zero: never): offline rules hold until PlannedAt + PlannedWorkHold.
	PlannedAt time.Time
}
