package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/resource"
)

// AlertEngineStore is the alert engine's store (cloud.AlertEngineStore),
// written once for both stores.
type AlertEngineStore struct{ *Store }

var _ alert.Store = AlertEngineStore{}

// Rules implements cloud.AlertEngineStore: the organization's live rules,
// enabled or not, oldest first. A deleted rule, default or not, stays
// deleted.
func (s AlertEngineStore) Rules(ctx context.Context, orgID string) ([]alert.Rule, error) {
	out, err := Collect(ctx, s.R, ScanRule, `SELECT `+RuleColumns+` FROM alert_rules WHERE org_id = ? AND deleted_at IS NULL ORDER BY created_at, id`, orgID)
	return out, s.Wrap("rules", err)
}

// RuleStatesSQL reads a device's state per rule: its open alert and when
// its last alert resolved (DeviceAlerts).
const RuleStatesSQL = `SELECT rule_id, COALESCE(MAX(id) FILTER (WHERE state <> 'RESOLVED'), ''), MAX(resolved_at) FILTER (WHERE state = 'RESOLVED')
		FROM alerts WHERE org_id = ? AND device_id = ? GROUP BY rule_id`

// ScanRuleState reads a row of RuleStatesSQL.
func ScanRuleState(r Row) (rule string, st alert.RuleState, err error) {
	var open string
	var resolved sql.NullInt64
	err = r.Scan(&rule, &open, &resolved)
	st = alert.RuleState{OpenID: open}
	if resolved.Valid && resolved.Int64 != 0 {
		st.LastResolved = time.UnixMilli(resolved.Int64).UTC()
	}
	return rule, st, err
}

// OpenAlert stores an ACTIVE alert and, with o.WithEvent, its alert.<rule>
// event, in one transaction; opened is false when the device already has
// an open alert of the rule (the unique partial index decides, across
// relays).
func (s AlertEngineStore) OpenAlert(ctx context.Context, o alert.Opening) (resource.Alert, bool, error) {
	return OpenAlert(ctx, s.Store, o, `INSERT OR IGNORE INTO alerts (id, org_id, device_id, rule_id, state, severity, message, payload, created_at)
		VALUES (?, ?, ?, ?, 'ACTIVE', ?, ?, ?, ?)`)
}

// ResolveAlert resolves the device's open alert of the rule and stores an
// alert.resolved event, in one transaction.
func (s AlertEngineStore) ResolveAlert(ctx context.Context, orgID, deviceID string, r alert.Rule, message string, at time.Time) (resource.Alert, bool, error) {
	return ResolveAlert(ctx, s.Store, orgID, deviceID, r, message, at)
}

// OpenAlertID returns the id of the device's open alert of the rule, or "".
func (s AlertEngineStore) OpenAlertID(ctx context.Context, deviceID, ruleID string) (string, error) {
	var id string
	err := s.R.QueryRow(ctx, `SELECT id FROM alerts WHERE device_id = ? AND rule_id = ? AND state <> 'RESOLVED'`, deviceID, ruleID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, s.Wrap("open alert", err)
}

// OfflineDevices returns up to limit devices (all, or only deviceID when
// not ""), ordered by id after cursor, that are OFFLINE with no heartbeat
// for three of their heartbeat intervals at now, with their tags and when
// they last reported planned work. Whether a rule opens an alert for one
// is the engine's decision, and OpenAlert's (once per outage, planned
// work).
func (s AlertEngineStore) OfflineDevices(ctx context.Context, now time.Time, deviceID, cursor string, limit int) ([]alert.Offline, error) {
	out, err := Collect(ctx, s.R, ScanOffline, OfflineDevicesSQL, cursor, deviceID, deviceID, now.UnixMilli(), limit)
	return out, s.Wrap("offline devices", err)
}

// OfflineDevicesSQL is OfflineDevices' read (arguments: cursor, device id
// twice, now, limit): the OFFLINE devices by id (devices_offline).
const OfflineDevicesSQL = `SELECT ` + OfflineColumns + ` FROM devices d
	WHERE d.status = 'OFFLINE' AND d.id > ? AND (? = '' OR d.id = ?)
	  AND d.last_seen IS NOT NULL AND d.last_seen + 3 * d.agent_heartbeat_ms <= ?
	ORDER BY d.id LIMIT ?`
