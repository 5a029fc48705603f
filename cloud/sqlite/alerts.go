package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// AlertService implements cloud.AlertService on the store.
type AlertService struct {
	db *DB
	// Observer, when set before use, is told after an acknowledge or resolve
	// that changed the alert's state ("alert.acknowledged", "alert.resolved").
	Observer cloud.AlertObserver
}

var _ cloud.AlertService = (*AlertService)(nil)

// NewAlertService returns the alert service of db.
func NewAlertService(db *DB) *AlertService { return &AlertService{db: db} }

// ListAlerts lists the organization's alerts in f.State (ACTIVE when
// empty), newest first (created_at, then id, both descending),
// keyset-paginated. The cursor must be an alert of the organization; the
// filters are not applied to it, since an alert's state may change between
// two pages.
func (s *AlertService) ListAlerts(ctx context.Context, orgID string, f cloud.AlertFilter) (resource.List[resource.Alert], error) {
	return listPage(ctx, s.db, sqlstore.AlertList(orgID, f))
}

// Alert returns the organization's alert id, or ENOTFOUND.
func (s *AlertService) Alert(ctx context.Context, orgID, id string) (resource.Alert, error) {
	a, err := sqlstore.ScanAlert(s.db.R.QueryRowContext(ctx, `SELECT `+sqlstore.AlertColumns+` FROM alerts WHERE id = ? AND org_id = ?`, id, orgID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, alertNotFound(id)
	}
	if err != nil {
		return a, fmt.Errorf("sqlite: alert: %w", err)
	}
	return a, nil
}

func alertNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "alert %q not found", id)
}

// Acknowledge moves an ACTIVE alert to ACKNOWLEDGED (acknowledgedAt set).
// An ACKNOWLEDGED alert is returned unchanged; a RESOLVED one is ERESOLVED.
func (s *AlertService) Acknowledge(ctx context.Context, orgID, id string) (resource.Alert, error) {
	return s.transition(ctx, orgID, id, "alert.acknowledged",
		`UPDATE alerts SET state = 'ACKNOWLEDGED', acknowledged_at = ? WHERE id = ? AND org_id = ? AND state = 'ACTIVE'`,
		func(a resource.Alert) error {
			if a.State == resource.AlertResolved {
				return cloud.Errorf(cloud.ERESOLVED, "alert %q is already resolved", id)
			}
			return nil
		})
}

// Resolve moves an ACTIVE or ACKNOWLEDGED alert to RESOLVED (resolvedAt
// set, acknowledgedAt kept) and records an alert.resolved device event, as
// the alert engine does when it resolves one. A RESOLVED alert is returned
// unchanged, its first resolvedAt preserved, and no event is recorded.
func (s *AlertService) Resolve(ctx context.Context, orgID, id string) (resource.Alert, error) {
	return s.transition(ctx, orgID, id, "alert.resolved",
		`UPDATE alerts SET state = 'RESOLVED', resolved_at = ? WHERE id = ? AND org_id = ? AND state <> 'RESOLVED'`, nil)
}

// resolvedEvent stores the alert.resolved event of an alert resolved
// through the API, in the transaction that resolved it.
func resolvedEvent(ctx context.Context, tx *sql.Tx, orgID string, a resource.Alert) error {
	var rule string
	if err := tx.QueryRowContext(ctx, `SELECT name FROM alert_rules WHERE id = ?`, a.RuleID).Scan(&rule); err != nil {
		return err
	}
	data, err := json.Marshal(map[string]any{"alertId": a.ID, "ruleId": a.RuleID, "rule": rule, "resolvedBy": "api"})
	if err != nil {
		return err
	}
	return insertEvent(ctx, tx, orgID, a.DeviceID, resource.Event{ID: ids.New(), Type: EventAlertResolved, Severity: resource.SeverityInfo,
		Message: rule + " alert resolved through the API", Data: data, CreatedAt: *a.ResolvedAt})
}

// EventAlertResolved is the type of the device event recorded when an alert
// closes.
const EventAlertResolved = "alert.resolved"

// transition runs one conditional UPDATE and reads the row back in one
// immediate transaction, so concurrent calls serialize on the writer and
// only one of them changes the row. The observer hears of real changes only.
func (s *AlertService) transition(ctx context.Context, orgID, id, event, update string, check func(resource.Alert) error) (resource.Alert, error) {
	var a resource.Alert
	var changed bool
	err := s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, update, s.db.NowMs(), id, orgID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		a, err = sqlstore.ScanAlert(tx.QueryRowContext(ctx, `SELECT `+sqlstore.AlertColumns+` FROM alerts WHERE id = ? AND org_id = ?`, id, orgID))
		if errors.Is(err, sql.ErrNoRows) {
			return alertNotFound(id)
		}
		if err != nil {
			return err
		}
		if changed && a.State == resource.AlertResolved {
			return resolvedEvent(ctx, tx, orgID, a)
		}
		return nil
	})
	if err != nil {
		if cloud.ErrorCode(err) != cloud.EINTERNAL {
			return resource.Alert{}, err
		}
		return resource.Alert{}, fmt.Errorf("sqlite: %s: %w", event, err)
	}
	if check != nil {
		if err := check(a); err != nil {
			return resource.Alert{}, err
		}
	}
	if changed && s.Observer != nil {
		s.Observer.AlertChanged(ctx, event, a)
	}
	return a, nil
}

// NewAlert is what InsertAlert needs. RuleID or RuleName (of the device's
// organization) names the rule.
type NewAlert struct {
	ID        string // "" for a fresh id
	DeviceID  string
	RuleID    string
	RuleName  string
	State     resource.AlertState // "" for ACTIVE
	Severity  resource.Severity   // "" for the rule's severity
	Message   string
	Payload   json.RawMessage // nil for {}
	CreatedAt time.Time       // zero for now
}

// InsertAlert stores an alert of the device. A second open alert (ACTIVE or
// ACKNOWLEDGED) for the same device and rule is ECONFLICT.
func (db *DB) InsertAlert(ctx context.Context, na NewAlert) (resource.Alert, error) {
	if na.ID == "" {
		na.ID = ids.New()
	}
	if na.State == "" {
		na.State = resource.AlertActive
	}
	if len(na.Payload) == 0 || string(na.Payload) == "null" {
		na.Payload = json.RawMessage(`{}`)
	}
	if na.CreatedAt.IsZero() {
		na.CreatedAt = db.Now()
	}
	created := na.CreatedAt.UnixMilli()
	var a resource.Alert
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		var orgID string
		if err := tx.QueryRowContext(ctx, `SELECT org_id FROM devices WHERE id = ?`, na.DeviceID).Scan(&orgID); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return deviceNotFound(na.DeviceID)
			}
			return err
		}
		var ruleSev string
		q, arg := `SELECT id, severity FROM alert_rules WHERE org_id = ? AND id = ?`, na.RuleID
		if na.RuleID == "" {
			q, arg = `SELECT id, severity FROM alert_rules WHERE org_id = ? AND name = ?`, na.RuleName
		}
		if err := tx.QueryRowContext(ctx, q, orgID, arg).Scan(&na.RuleID, &ruleSev); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return cloud.Errorf(cloud.ENOTFOUND, "alert rule %q not found", arg)
			}
			return err
		}
		if na.Severity == "" {
			na.Severity = resource.Severity(ruleSev)
		}
		var acked, resolved sql.NullInt64
		if na.State != resource.AlertActive {
			acked = sql.NullInt64{Int64: created, Valid: na.State == resource.AlertAcknowledged}
		}
		if na.State == resource.AlertResolved {
			resolved = sql.NullInt64{Int64: created, Valid: true}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO alerts (id, org_id, device_id, rule_id, state, severity, message, payload, acknowledged_at, resolved_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			na.ID, orgID, na.DeviceID, na.RuleID, string(na.State), string(na.Severity), na.Message, string(na.Payload), acked, resolved, created)
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed: alerts.device_id") {
				return cloud.Errorf(cloud.ECONFLICT, "an open alert of this rule already exists for the device")
			}
			return err
		}
		a, err = sqlstore.ScanAlert(tx.QueryRowContext(ctx, `SELECT `+sqlstore.AlertColumns+` FROM alerts WHERE id = ?`, na.ID))
		return err
	})
	if err != nil {
		if cloud.ErrorCode(err) != cloud.EINTERNAL {
			return resource.Alert{}, err
		}
		return resource.Alert{}, fmt.Errorf("sqlite: insert alert: %w", err)
	}
	return a, nil
}
