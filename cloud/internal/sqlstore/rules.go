package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// RuleService implements cloud.RuleService on a store's tables (issue 27:
// the store-rules lane writes it).
type RuleService struct {
	Tables Tables
	// Observer, when set before use, hears of every committed rule change.
	Observer cloud.RulesObserver
}

var _ cloud.RuleService = (*RuleService)(nil)

func notYet() error { return cloud.Errorf(cloud.EINTERNAL, "not implemented yet") }

func (s *RuleService) TestChannel(ctx context.Context, orgID, id string) (string, error) {
	return "", notYet()
}

// StatusDevices implements cloud.AlertEngineStore (the store-rules lane).
func (s AlertEngineStore) StatusDevices(ctx context.Context, statuses []resource.DeviceStatus, cursor string, limit int) ([]cloud.StatusDevice, error) {
	return nil, notYet()
}

// Remind implements cloud.AlertEngineStore (the notifications-in-store lane).
func (s AlertEngineStore) Remind(ctx context.Context, now time.Time, limit int) (int, error) {
	return 0, notYet()
}

// QueueAlertNotifications writes in tx the outbox deliveries of an alert
// change (event: alert.opened, alert.acknowledged, alert.resolved or
// notify.EventReminder) made at at: the organization's alert webhook (the
// spec's body, signed; not for reminders) and, for opened, resolved and
// reminders, one delivery per notification channel of r.Notify whose
// minSeverity the alert reaches, unless a silence of the organization
// covers the device at at. It returns how many deliveries it wrote (the
// outbox lane writes it; every path that opens, resolves or reminds calls
// it inside its transaction).
func QueueAlertNotifications(ctx context.Context, tx Querier, event string, a resource.Alert, r cloud.AlertRule, at time.Time) (int, error) {
	return 0, nil
}
