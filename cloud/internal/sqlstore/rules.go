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

func (s *RuleService) PreviewRule(ctx context.Context, orgID string, r resource.AlertRule, from, to time.Time) (resource.RulePreview, error) {
	return resource.RulePreview{}, notYet()
}

// History implements cloud.AlertEngineStore (the preview lane).
func (s AlertEngineStore) History(ctx context.Context, orgID, deviceID string, c cloud.RuleCondition, from, to time.Time, limit int) ([]cloud.RuleSample, error) {
	return nil, notYet()
}
