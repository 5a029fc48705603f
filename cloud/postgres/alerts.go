package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// AlertPage implements sqlstore.AlertTables.
func (t tables) AlertPage(ctx context.Context, k sqlstore.Keyset[resource.Alert]) (resource.List[resource.Alert], error) {
	return listPage(ctx, t.db, k)
}

const alertSQL = `SELECT ` + sqlstore.AlertColumns + ` FROM alerts WHERE id = $1 AND org_id = $2`

// Alert implements sqlstore.AlertTables.
func (t tables) Alert(ctx context.Context, orgID, id string) (resource.Alert, error) {
	a, err := sqlstore.ScanAlert(t.db.Pool.QueryRow(ctx, alertSQL, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, alertNotFound(id)
	}
	if err != nil {
		return a, storeError("postgres: alert: %w", err)
	}
	return a, nil
}

var alertNotFound = sqlstore.AlertNotFound

// AlertTx implements sqlstore.AlertTables: the row lock of an UPDATE orders
// concurrent transactions (another relay's too).
func (t tables) AlertTx(ctx context.Context, eventsAt int64, what string, fn func(sqlstore.Querier) error) error {
	if err := t.db.ensureDays(ctx, "events", eventsAt); err != nil {
		return err
	}
	return wrapErr(what, t.db.writeTx(ctx, func(tx pgx.Tx) error { return fn(pgConn{tx}) }))
}

// insertEvents stores relay-made events (fresh ids) of one device in tx.
// The caller made sure of their partitions (ensureDays) before it began tx:
// creating one takes a lock on the table that a transaction which already
// wrote to it would wait for.
func (db *DB) insertEvents(ctx context.Context, tx pgx.Tx, orgID, deviceID string, evs []resource.Event) error {
	_, err := insertEventRows(ctx, tx, repeat(orgID, len(evs)), repeat(deviceID, len(evs)), evs)
	return err
}

// repeat returns n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// AlertEngineStore is what the alert engine (alert.Store) needs.
type AlertEngineStore struct{ db *DB }

var _ alert.Store = (*AlertEngineStore)(nil)

// NewAlertEngineStore returns the alert engine's store on db.
func NewAlertEngineStore(db *DB) *AlertEngineStore { return &AlertEngineStore{db: db} }

// Rules returns the organization's rules, first inserting any default rule
// it lacks.
func (s *AlertEngineStore) Rules(ctx context.Context, orgID string) ([]alert.Rule, error) {
	rules, err := s.readRules(ctx, orgID)
	if err != nil || len(rules) >= len(cloud.DefaultRules()) {
		return rules, err
	}
	err = s.db.writeTx(ctx, func(tx pgx.Tx) error {
		return sqlstore.AddDefaultRules(ctx, pgConn{tx}, addRuleSQL, orgID, s.db.NowMs())
	})
	if err != nil {
		return nil, storeError("postgres: default rules: %w", err)
	}
	return s.readRules(ctx, orgID)
}

func (s *AlertEngineStore) readRules(ctx context.Context, orgID string) ([]alert.Rule, error) {
	return query(ctx, s.db, "rules", sqlstore.ScanRule, `SELECT `+sqlstore.RuleColumns+` FROM alert_rules WHERE org_id = $1 ORDER BY name`, orgID)
}

// Window implements alert.Store: the device's newest n samples captured at
// or before until (ascending) and, per rule id, its open alert and when its
// last alert resolved, two queries sent together in one round trip (a pgx
// batch) and read in turn.
func (s *AlertEngineStore) Window(ctx context.Context, orgID, deviceID string, until time.Time, n int) ([]resource.MetricSample, map[string]alert.RuleState, error) {
	var ms []resource.MetricSample
	states := map[string]alert.RuleState{}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+sqlstore.SampleColumns+` FROM metrics
		WHERE device_id = $1 AND captured_at <= $2 ORDER BY captured_at DESC LIMIT $3`, deviceID, until.UnixMilli(), n).
		Query(func(rows pgx.Rows) (err error) {
			ms, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (resource.MetricSample, error) { return sqlstore.ScanSample(r) })
			return err
		})
	b.Queue(`SELECT rule_id, COALESCE(MAX(id) FILTER (WHERE state <> 'RESOLVED'), ''), MAX(resolved_at) FILTER (WHERE state = 'RESOLVED')
		FROM alerts WHERE org_id = $1 AND device_id = $2 GROUP BY rule_id`, orgID, deviceID).
		Query(func(rows pgx.Rows) error {
			var rule, open string
			var resolved *int64
			_, err := pgx.ForEachRow(rows, []any{&rule, &open, &resolved}, func() error {
				states[rule] = alert.RuleState{OpenID: open, LastResolved: msTime(resolved)}
				return nil
			})
			return err
		})
	if err := s.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, storeError("postgres: alert window of %s: %w", deviceID, err)
	}
	slices.Reverse(ms)
	return ms, states, nil
}

// OpenAlert stores an ACTIVE alert and, with o.WithEvent, its alert.<rule>
// event, in one transaction; opened is false when the device already has
// an open alert of the rule (the unique partial index decides, across
// relays).
func (s *AlertEngineStore) OpenAlert(ctx context.Context, o alert.Opening) (resource.Alert, bool, error) {
	return sqlstore.OpenAlert(ctx, tables{s.db}, o, `INSERT INTO alerts (id, org_id, device_id, rule_id, state, severity, message, payload, created_at)
		VALUES (?, ?, ?, ?, 'ACTIVE', ?, ?, ?, ?) ON CONFLICT (device_id, rule_id) WHERE state <> 'RESOLVED' DO NOTHING`)
}

// ResolveAlert resolves the device's open alert of the rule and stores an
// alert.resolved event, in one transaction.
func (s *AlertEngineStore) ResolveAlert(ctx context.Context, orgID, deviceID string, r alert.Rule, message string, at time.Time) (resource.Alert, bool, error) {
	return sqlstore.ResolveAlert(ctx, tables{s.db}, orgID, deviceID, r, message, at)
}

// OpenAlertID returns the id of the device's open alert of the rule, or "".
func (s *AlertEngineStore) OpenAlertID(ctx context.Context, deviceID, ruleID string) (string, error) {
	var id string
	err := s.db.Pool.QueryRow(ctx, `SELECT id FROM alerts WHERE device_id = $1 AND rule_id = $2 AND state <> 'RESOLVED'`, deviceID, ruleID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", storeError("postgres: open alert: %w", err)
	}
	return id, nil
}

// OfflineDevices returns up to limit devices (all, or only deviceID when
// not "") that are OFFLINE with no heartbeat for three of their heartbeat
// intervals at now, and that have no device_offline alert created since
// their last heartbeat.
func (s *AlertEngineStore) OfflineDevices(ctx context.Context, now time.Time, deviceID string, limit int) ([]alert.Offline, error) {
	return query(ctx, s.db, "offline devices", sqlstore.ScanOffline, `SELECT `+sqlstore.OfflineColumns+` FROM devices d
		WHERE d.status = 'OFFLINE' AND d.last_seen IS NOT NULL AND d.last_seen + 3 * d.agent_heartbeat_ms <= $1
		  AND ($2 = '' OR d.id = $2)
		  AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.device_id = d.id
		        AND a.rule_id = (SELECT r.id FROM alert_rules r WHERE r.org_id = d.org_id AND r.name = $3)
		        AND a.created_at >= d.last_seen)
		LIMIT $4`, now.UnixMilli(), deviceID, alert.RuleDeviceOffline, limit)
}
