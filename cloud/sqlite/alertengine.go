package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// AlertEngineStore is what the alert engine (alert.Store) needs, on SQLite.
type AlertEngineStore struct {
	db *DB
}

var _ alert.Store = (*AlertEngineStore)(nil)

// NewAlertEngineStore returns the alert engine's store on db.
func NewAlertEngineStore(db *DB) *AlertEngineStore { return &AlertEngineStore{db: db} }

// Rules returns the organization's rules, first inserting any default rule
// (cloud.DefaultRules) it lacks.
func (s *AlertEngineStore) Rules(ctx context.Context, orgID string) ([]alert.Rule, error) {
	rules, err := s.readRules(ctx, orgID)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, r := range rules {
		have[r.Name] = true
	}
	missing := false
	for _, d := range cloud.DefaultRules() {
		if !have[d.Name] {
			missing = true
		}
	}
	if !missing {
		return rules, nil
	}
	err = s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		return sqlstore.AddDefaultRules(ctx, sqlConn{tx}, addRuleSQL, orgID, s.db.NowMs())
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: default rules: %w", err)
	}
	return s.readRules(ctx, orgID)
}

func (s *AlertEngineStore) readRules(ctx context.Context, orgID string) ([]alert.Rule, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+sqlstore.RuleColumns+` FROM alert_rules WHERE org_id = ? ORDER BY name`, orgID)
	return collect(rows, err, "rules", sqlstore.ScanRule)
}

// Window implements alert.Store: recentMetrics and ruleStates.
func (s *AlertEngineStore) Window(ctx context.Context, orgID, deviceID string, until time.Time, n int) ([]resource.MetricSample, map[string]alert.RuleState, error) {
	ms, err := s.recentMetrics(ctx, deviceID, until, n)
	if err != nil {
		return nil, nil, err
	}
	st, err := s.ruleStates(ctx, orgID, deviceID)
	return ms, st, err
}

// recentMetrics returns the newest n samples captured at or before until,
// ascending.
func (s *AlertEngineStore) recentMetrics(ctx context.Context, deviceID string, until time.Time, n int) ([]resource.MetricSample, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+sqlstore.SampleColumns+` FROM metrics
		WHERE device_id = ? AND captured_at <= ? ORDER BY captured_at DESC LIMIT ?`, deviceID, until.UnixMilli(), n)
	out, err := collect(rows, err, "recent metrics", sqlstore.ScanSample)
	slices.Reverse(out)
	return out, err
}

// ruleStates returns, per rule id, the device's open alert and when its
// last alert resolved.
func (s *AlertEngineStore) ruleStates(ctx context.Context, orgID, deviceID string) (map[string]alert.RuleState, error) {
	out := map[string]alert.RuleState{}
	rows, err := s.db.R.QueryContext(ctx, `SELECT rule_id, id FROM alerts WHERE org_id = ? AND device_id = ? AND state IN ('ACTIVE', 'ACKNOWLEDGED')`, orgID, deviceID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: rule states: %w", err)
	}
	for rows.Next() {
		var rule, id string
		if err := rows.Scan(&rule, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: rule states: %w", err)
		}
		st := out[rule]
		st.OpenID = id
		out[rule] = st
	}
	rows.Close()
	rows, err = s.db.R.QueryContext(ctx, `SELECT rule_id, MAX(resolved_at) FROM alerts WHERE org_id = ? AND state = 'RESOLVED' AND device_id = ? GROUP BY rule_id`, orgID, deviceID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: rule states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rule string
		var at sql.NullInt64
		if err := rows.Scan(&rule, &at); err != nil {
			return nil, fmt.Errorf("sqlite: rule states: %w", err)
		}
		st := out[rule]
		st.LastResolved = MsTime(at)
		out[rule] = st
	}
	return out, rows.Err()
}

// OpenAlert stores an ACTIVE alert and, with o.WithEvent, its alert.<rule>
// event, in one transaction; opened is false when the device already has an
// open alert of the rule.
func (s *AlertEngineStore) OpenAlert(ctx context.Context, o alert.Opening) (resource.Alert, bool, error) {
	return sqlstore.OpenAlert(ctx, tables{s.db}, o, `INSERT OR IGNORE INTO alerts (id, org_id, device_id, rule_id, state, severity, message, payload, created_at)
		VALUES (?, ?, ?, ?, 'ACTIVE', ?, ?, ?, ?)`)
}

// ResolveAlert resolves the device's open alert of the rule and stores an
// alert.resolved event, in one transaction.
func (s *AlertEngineStore) ResolveAlert(ctx context.Context, orgID, deviceID string, r alert.Rule, message string, at time.Time) (resource.Alert, bool, error) {
	return sqlstore.ResolveAlert(ctx, tables{s.db}, orgID, deviceID, r, message, at)
}

// OpenAlertID returns the id of the device's open alert of the rule, or "".
func (s *AlertEngineStore) OpenAlertID(ctx context.Context, deviceID, ruleID string) (string, error) {
	var id string
	err := s.db.R.QueryRowContext(ctx, `SELECT id FROM alerts WHERE device_id = ? AND rule_id = ? AND state <> 'RESOLVED'`, deviceID, ruleID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: open alert: %w", err)
	}
	return id, nil
}

// OfflineDevices returns up to limit devices (all, or only deviceID when
// not "") that are OFFLINE with no heartbeat for three of their heartbeat
// intervals at now, and that have no device_offline alert created since
// their last heartbeat.
func (s *AlertEngineStore) OfflineDevices(ctx context.Context, now time.Time, deviceID string, limit int) ([]alert.Offline, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+sqlstore.OfflineColumns+` FROM devices d
		WHERE d.status = 'OFFLINE' AND d.last_seen IS NOT NULL AND d.last_seen + 3 * d.agent_heartbeat_ms <= ?
		  AND (? = '' OR d.id = ?)
		  AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.device_id = d.id
		        AND a.rule_id = (SELECT r.id FROM alert_rules r WHERE r.org_id = d.org_id AND r.name = ?)
		        AND a.created_at >= d.last_seen)
		LIMIT ?`, now.UnixMilli(), deviceID, deviceID, alert.RuleDeviceOffline, limit)
	return collect(rows, err, "offline devices", sqlstore.ScanOffline)
}
