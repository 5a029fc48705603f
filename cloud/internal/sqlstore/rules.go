package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// RuleService implements cloud.RuleService on a store's tables (issue 27:
// the store-rules lane writes it).
type RuleService struct {
	Tables Tables
	// Observer, when set before use, hears of every committed rule change.
	Observer cloud.RulesObserver
	// Alerts, when set before use, hears of each alert a rule change
	// resolved ("alert.resolved"), after the commit.
	Alerts cloud.AlertObserver
}

var _ cloud.RuleService = (*RuleService)(nil)

func notYet() error { return cloud.Errorf(cloud.EINTERNAL, "not implemented yet") }

// StatusDevices implements cloud.AlertEngineStore (the store-rules lane).
func (s AlertEngineStore) StatusDevices(ctx context.Context, statuses []resource.DeviceStatus, cursor string, limit int) ([]cloud.StatusDevice, error) {
	return nil, notYet()
}
