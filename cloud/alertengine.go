package cloud

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// AlertRule is an organization's alert rule.
type AlertRule struct {
	ID          string
	OrgID       string
	Name        string
	Severity    resource.Severity
	Metric      string  // cpuPct, memPct, diskUsedPct, tempCpu; "" for other rules
	Threshold   float64 // a sample at or above counts
	Clear       float64 // an open alert resolves on a sample below
	Consecutive int     // samples at or above Threshold before opening
	Enabled     bool
}

// AlertRuleState is a device's state for one rule.
type AlertRuleState struct {
	OpenID       string    // the open (ACTIVE or ACKNOWLEDGED) alert; "" when none
	LastResolved time.Time // when the last alert of the rule resolved; zero when never
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
}

// AlertEngineStore is what the alert engine (cloud/alert) needs from the
// relay's store.
type AlertEngineStore interface {
	// Rules returns the organization's rules, creating missing default rules.
	Rules(ctx context.Context, orgID string) ([]AlertRule, error)
	// Window returns what the engine weighs a device's new samples against:
	// its newest n samples captured at or before until, in ascending order,
	// and its state per rule id. It runs once per stored batch of samples,
	// so a store with round trips answers both in one.
	Window(ctx context.Context, orgID, deviceID string, until time.Time, n int) ([]resource.MetricSample, map[string]AlertRuleState, error)
	// OpenAlert stores an ACTIVE alert (and its alert.<rule> event when
	// o.WithEvent); opened is false when one is already open, or when
	// o.LastSeen is set and the device is no longer OFFLINE with that last
	// heartbeat (checked in the same transaction, ordered with the
	// device's hello).
	OpenAlert(ctx context.Context, o AlertOpening) (a resource.Alert, opened bool, err error)
	// ResolveAlert resolves the device's open alert of the rule and stores
	// an alert.resolved event with message; resolved is false when none was
	// open.
	ResolveAlert(ctx context.Context, orgID, deviceID string, rule AlertRule, message string, at time.Time) (a resource.Alert, resolved bool, err error)
	// OpenAlertID returns the id of the device's open alert of the rule, or
	// "" (a read: resolving checks it first).
	OpenAlertID(ctx context.Context, deviceID, ruleID string) (string, error)
	// OfflineDevices returns up to limit devices (all, or only deviceID when
	// not "") that are OFFLINE with no heartbeat for three heartbeat
	// intervals at now and have no device_offline alert created since their
	// last heartbeat.
	OfflineDevices(ctx context.Context, now time.Time, deviceID string, limit int) ([]OfflineDevice, error)
}

// OfflineDevice is a device that has been silent for three heartbeat intervals.
type OfflineDevice struct {
	Device    DeviceRef
	LastSeen  time.Time
	Heartbeat time.Duration
}
