package sqlstore

import (
	"github.com/fleet/fleet/cloud"
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
