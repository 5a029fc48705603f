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

func (s *RuleService) ListRules(ctx context.Context, orgID string, p cloud.Page) (resource.List[resource.AlertRule], error) {
	return resource.List[resource.AlertRule]{}, notYet()
}
func (s *RuleService) Rule(ctx context.Context, orgID, id string) (resource.AlertRule, error) {
	return resource.AlertRule{}, notYet()
}
func (s *RuleService) CreateRule(ctx context.Context, orgID string, r resource.AlertRule) (resource.AlertRule, error) {
	return resource.AlertRule{}, notYet()
}
func (s *RuleService) UpdateRule(ctx context.Context, orgID, id string, p cloud.RulePatch) (resource.AlertRule, error) {
	return resource.AlertRule{}, notYet()
}
func (s *RuleService) DeleteRule(ctx context.Context, orgID, id string) error { return notYet() }
func (s *RuleService) PreviewRule(ctx context.Context, orgID string, r resource.AlertRule, from, to time.Time) (resource.RulePreview, error) {
	return resource.RulePreview{}, notYet()
}
func (s *RuleService) CreateSilence(ctx context.Context, orgID string, n cloud.NewSilence) (resource.Silence, error) {
	return resource.Silence{}, notYet()
}
func (s *RuleService) ListSilences(ctx context.Context, orgID string, f cloud.SilenceFilter) (resource.List[resource.Silence], error) {
	return resource.List[resource.Silence]{}, notYet()
}
func (s *RuleService) DeleteSilence(ctx context.Context, orgID, id string) error { return notYet() }
func (s *RuleService) CreateChannel(ctx context.Context, c cloud.NewChannel) (resource.NotificationChannel, error) {
	return resource.NotificationChannel{}, notYet()
}
func (s *RuleService) ListChannels(ctx context.Context, orgID string) ([]resource.NotificationChannel, error) {
	return nil, notYet()
}
func (s *RuleService) Channel(ctx context.Context, id string) (string, resource.NotificationChannel, error) {
	return "", resource.NotificationChannel{}, notYet()
}
func (s *RuleService) DeleteChannel(ctx context.Context, orgID, id string) error { return notYet() }

// DeviceAlerts implements cloud.AlertEngineStore (the store-rules lane).
func (s AlertEngineStore) DeviceAlerts(ctx context.Context, orgID, deviceID string) (cloud.DeviceAlertState, error) {
	return cloud.DeviceAlertState{}, notYet()
}

// History implements cloud.AlertEngineStore (the preview lane).
func (s AlertEngineStore) History(ctx context.Context, orgID, deviceID string, c cloud.RuleCondition, from, to time.Time, limit int) ([]cloud.RuleSample, error) {
	return nil, notYet()
}

// StatusDevices implements cloud.AlertEngineStore (the store-rules lane).
func (s AlertEngineStore) StatusDevices(ctx context.Context, statuses []resource.DeviceStatus, cursor string, limit int) ([]cloud.StatusDevice, error) {
	return nil, notYet()
}
