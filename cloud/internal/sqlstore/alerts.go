package sqlstore

import (
	"context"
	"encoding/json"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// AlertTables is what AlertService reads and changes of a store's alerts
// table, in the store's dialect.
type AlertTables interface {
	// AlertPage reads a page of a list.
	AlertPage(ctx context.Context, k Keyset[resource.Alert]) (resource.List[resource.Alert], error)
	// Alert reads the organization's alert id, or ENOTFOUND.
	Alert(ctx context.Context, orgID, id string) (resource.Alert, error)
	// MoveAlert runs MoveAlertSQL(to) and reads the alert back in one
	// transaction, so that of concurrent calls only one changes the row,
	// and when it resolved the alert stores APIResolvedEvent in the same
	// transaction. ENOTFOUND when the organization has no alert id.
	MoveAlert(ctx context.Context, orgID, id string, to resource.AlertState) (a resource.Alert, changed bool, err error)
}

// MoveAlertSQL is the conditional UPDATE that moves an alert to ACKNOWLEDGED
// (from ACTIVE) or RESOLVED (from ACTIVE or ACKNOWLEDGED), setting the
// state's time, in the dialect of ph (arguments: the time in Unix
// milliseconds, the alert, the organization).
func MoveAlertSQL(to resource.AlertState, ph Placeholder) string {
	set, from := `acknowledged_at`, `state = 'ACTIVE'`
	if to == resource.AlertResolved {
		set, from = `resolved_at`, `state <> 'RESOLVED'`
	}
	return `UPDATE alerts SET state = '` + string(to) + `', ` + set + ` = ` + ph(1) + ` WHERE id = ` + ph(2) + ` AND org_id = ` + ph(3) + ` AND ` + from
}

// APIResolvedEvent is the alert.resolved event of alert a of the rule
// named rule, resolved through the API.
func APIResolvedEvent(a resource.Alert, rule string) (resource.Event, error) {
	data, err := json.Marshal(map[string]any{"alertId": a.ID, "ruleId": a.RuleID, "rule": rule, "resolvedBy": "api"})
	if err != nil {
		return resource.Event{}, err
	}
	return resource.Event{ID: ids.New(), Type: alert.EventResolved, Severity: resource.SeverityInfo,
		Message: rule + " alert resolved through the API", Data: data, CreatedAt: *a.ResolvedAt}, nil
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

// move moves the alert; the Observer hears of real changes only, as event.
func (s *AlertService) move(ctx context.Context, orgID, id string, to resource.AlertState, event string) (resource.Alert, error) {
	a, changed, err := s.Tables.MoveAlert(ctx, orgID, id, to)
	if err != nil {
		return resource.Alert{}, err
	}
	if changed && s.Observer != nil {
		s.Observer.AlertChanged(ctx, event, a)
	}
	return a, nil
}
