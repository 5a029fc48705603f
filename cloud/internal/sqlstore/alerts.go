package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// AlertTables is what AlertService and ResolveAlert read and change of a
// store's alerts, in the store's dialect.
type AlertTables interface {
	// AlertPage reads a page of a list.
	AlertPage(ctx context.Context, k Keyset[resource.Alert]) (resource.List[resource.Alert], error)
	// Alert reads the organization's alert id, or ENOTFOUND.
	Alert(ctx context.Context, orgID, id string) (resource.Alert, error)
	// AlertTx runs fn in a write transaction that may store events created
	// at eventsAt (Unix milliseconds: a store that keeps events in daily
	// partitions makes sure of the day's first). Concurrent transactions
	// that change one alert run one after the other. Its error, unless a
	// domain error, is wrapped as the store's failure to do what.
	AlertTx(ctx context.Context, eventsAt int64, what string, fn func(Querier) error) error
	// Now is the store's clock.
	Now() time.Time
	// OutboxQueued tells, in tx and at its commit, the relays sharing the
	// database that deliveries were queued (Dialect.Changed; nothing where
	// no other relay shares it).
	OutboxQueued(ctx context.Context, tx Querier) error
	// audit writes, in tx, the audit record of a change of ctx's actor.
	auditor
}

// moveAlertSQL is the conditional UPDATE that moves an alert to
// ACKNOWLEDGED (from ACTIVE) or RESOLVED (from ACTIVE or ACKNOWLEDGED),
// setting the state's time (arguments: the time in Unix milliseconds, the
// alert, the organization).
func moveAlertSQL(to resource.AlertState) string {
	set, from := `acknowledged_at`, `state = 'ACTIVE'`
	if to == resource.AlertResolved {
		set, from = `resolved_at`, `state <> 'RESOLVED'`
	}
	return `UPDATE alerts SET state = '` + string(to) + `', ` + set + ` = ? WHERE id = ? AND org_id = ? AND ` + from
}

// apiResolvedEvent is the alert.resolved event of alert a of the rule
// named rule, resolved through the API.
func apiResolvedEvent(a resource.Alert, rule string) (resource.Event, error) {
	data, err := json.Marshal(map[string]any{"alertId": a.ID, "ruleId": a.RuleID, "rule": rule, "resolvedBy": "api"})
	if err != nil {
		return resource.Event{}, err
	}
	return resource.Event{ID: ids.New(), Type: alert.EventResolved, Severity: resource.SeverityInfo,
		Message: rule + " alert resolved through the API", Data: data, CreatedAt: *a.ResolvedAt}, nil
}

// InsertEvent stores e, an event of the organization's device, in tx.
func InsertEvent(ctx context.Context, tx Querier, orgID, deviceID string, e resource.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO events (id, org_id, device_id, type, severity, message, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, orgID, deviceID, e.Type, string(e.Severity), e.Message, string(e.Data), e.CreatedAt.UnixMilli())
	return err
}

// AlertNotFound is ENOTFOUND for alert id.
func AlertNotFound(id string) error { return cloud.Errorf(cloud.ENOTFOUND, "alert %q not found", id) }

// OpenAlert stores the ACTIVE alert that o opens (NewAlert) and, with
// o.WithEvent, its alert.<rule> event (OpenedEvent), in one AlertTx;
// opened is false when the device already has an open alert of the rule,
// for which insert, the store's INSERT (arguments: id, organization,
// device, rule, severity, message, payload, created_at), stores nothing,
// or when o.LastSeen is set and the device is no longer OFFLINE with that
// last heartbeat (alert.Store's OpenAlert).
func OpenAlert(ctx context.Context, t AlertTables, o alert.Opening, insert string) (a resource.Alert, opened bool, err error) {
	a = NewAlert(o)
	err = t.AlertTx(ctx, a.CreatedAt.UnixMilli(), "open alert", func(tx Querier) error {
		if !o.LastSeen.IsZero() {
			// Still the outage the sweep read? The UPDATE locks the device's
			// row: a hello committed first leaves nothing to match, one
			// committing later waits for this transaction and its resolve
			// then finds the alert. Once per outage: not when an alert of
			// the rule was created since the last heartbeat; and not while
			// planned work (REBOOTING, UPDATING) holds offline alerts.
			n, err := tx.Exec(ctx, `UPDATE devices SET last_seen = last_seen WHERE id = ? AND status = 'OFFLINE' AND last_seen = ?
				AND (planned_at IS NULL OR planned_at <= ?)
				AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.device_id = ? AND a.rule_id = ? AND a.created_at >= ?)`,
				o.DeviceID, o.LastSeen.UnixMilli(), o.At.Add(-cloud.PlannedWorkHold).UnixMilli(), o.DeviceID, o.Rule.ID, o.LastSeen.UnixMilli())
			if err != nil || n == 0 {
				return err
			}
		}
		n, err := tx.Exec(ctx, insert, a.ID, o.OrgID, o.DeviceID, o.Rule.ID, string(a.Severity), a.Message, string(a.Payload), a.CreatedAt.UnixMilli())
		if err != nil || n == 0 {
			return err
		}
		opened = true
		if o.WithEvent {
			e, err := OpenedEvent(o, a)
			if err != nil {
				return err
			}
			if err := InsertEvent(ctx, tx, o.OrgID, o.DeviceID, e); err != nil {
				return err
			}
		}
		r := o.Rule
		r.OrgID = o.OrgID
		return queueNotifications(ctx, t, tx, notify.EventOpened, a, r, a.CreatedAt.Time)
	})
	if err != nil {
		return resource.Alert{}, false, err
	}
	return a, opened, nil
}

// ResolveAlert resolves the device's open alert of rule r at at and stores
// its alert.resolved event (ResolvedEvent), in one transaction; resolved is
// false when the device had none open (alert.Store's ResolveAlert).
func ResolveAlert(ctx context.Context, t AlertTables, orgID, deviceID string, r alert.Rule, message string, at time.Time) (a resource.Alert, resolved bool, err error) {
	at = at.UTC().Truncate(time.Millisecond)
	err = t.AlertTx(ctx, at.UnixMilli(), "resolve alert", func(tx Querier) error {
		var err error
		a, err = ScanAlert(tx.QueryRow(ctx, `UPDATE alerts SET state = 'RESOLVED', resolved_at = ?
			WHERE org_id = ? AND device_id = ? AND rule_id = ? AND state IN ('ACTIVE', 'ACKNOWLEDGED') RETURNING `+AlertColumns,
			at.UnixMilli(), orgID, deviceID, r.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		resolved = true
		e, err := ResolvedEvent(a, r, message, at)
		if err != nil {
			return err
		}
		if err := InsertEvent(ctx, tx, orgID, deviceID, e); err != nil {
			return err
		}
		r.OrgID = orgID
		return queueNotifications(ctx, t, tx, notify.EventResolved, a, r, at)
	})
	if err != nil {
		return resource.Alert{}, false, err
	}
	return a, resolved, nil
}

// AlertService implements cloud.AlertService on a store's tables.
type AlertService struct {
	Tables AlertTables
	// Observer, when set before use, is told after an acknowledge or resolve
	// that changed the alert's state ("alert.acknowledged", "alert.resolved").
	Observer cloud.AlertObserver
}

var _ cloud.AlertService = (*AlertService)(nil)

// ListAlerts lists the organization's alerts in f.State (ACTIVE when
// empty), newest first (created_at, then id, both descending),
// keyset-paginated (AlertList).
func (s *AlertService) ListAlerts(ctx context.Context, orgID string, f cloud.AlertFilter) (resource.List[resource.Alert], error) {
	return s.Tables.AlertPage(ctx, AlertList(orgID, f))
}

// Alert returns the organization's alert id, or ENOTFOUND.
func (s *AlertService) Alert(ctx context.Context, orgID, id string) (resource.Alert, error) {
	return s.Tables.Alert(ctx, orgID, id)
}

// Acknowledge moves an ACTIVE alert to ACKNOWLEDGED (acknowledgedAt set).
// An ACKNOWLEDGED alert is returned unchanged; a RESOLVED one is ERESOLVED.
func (s *AlertService) Acknowledge(ctx context.Context, orgID, id string) (resource.Alert, error) {
	a, err := s.move(ctx, orgID, id, resource.AlertAcknowledged, "alert.acknowledged")
	if err == nil && a.State == resource.AlertResolved {
		return resource.Alert{}, cloud.Errorf(cloud.ERESOLVED, "alert %q is already resolved", id)
	}
	return a, err
}

// Resolve moves an ACTIVE or ACKNOWLEDGED alert to RESOLVED (resolvedAt
// set, acknowledgedAt kept) and records an alert.resolved device event, as
// the alert engine does when it resolves one. A RESOLVED alert is returned
// unchanged, its first resolvedAt preserved, and no event is recorded.
func (s *AlertService) Resolve(ctx context.Context, orgID, id string) (resource.Alert, error) {
	return s.move(ctx, orgID, id, resource.AlertResolved, alert.EventResolved)
}

// move moves the alert in one AlertTx: of concurrent calls only one
// changes the row, and when it resolves the alert it stores its
// alert.resolved event. The Observer hears of real changes only, as event.
func (s *AlertService) move(ctx context.Context, orgID, id string, to resource.AlertState, event string) (resource.Alert, error) {
	var a resource.Alert
	var changed bool
	now := s.Tables.Now().UnixMilli()
	err := s.Tables.AlertTx(ctx, now, event, func(tx Querier) error {
		n, err := tx.Exec(ctx, moveAlertSQL(to), now, id, orgID)
		if err != nil {
			return err
		}
		changed = n == 1
		a, err = ScanAlert(tx.QueryRow(ctx, `SELECT `+AlertColumns+` FROM alerts WHERE id = ? AND org_id = ?`, id, orgID))
		if errors.Is(err, sql.ErrNoRows) {
			return AlertNotFound(id)
		}
		if err != nil || !changed {
			return err
		}
		r, err := notifyRule(ctx, tx, orgID, a.RuleID)
		if err != nil {
			return err
		}
		action := cloud.ActionAlertAcknowledged
		if a.State == resource.AlertResolved {
			action = cloud.ActionAlertResolved
			e, err := apiResolvedEvent(a, r.Name)
			if err != nil {
				return err
			}
			if err := InsertEvent(ctx, tx, orgID, a.DeviceID, e); err != nil {
				return err
			}
		}
		if err := queueNotifications(ctx, s.Tables, tx, event, a, r, time.UnixMilli(now)); err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, action, cloud.AuditTarget{Kind: cloud.TargetAlert, ID: id},
			map[string]any{"ruleId": a.RuleID, "rule": r.Name, "deviceId": a.DeviceID})
	})
	if err != nil {
		return resource.Alert{}, err
	}
	if changed && s.Observer != nil {
		s.Observer.AlertChanged(ctx, event, a)
	}
	return a, nil
}
