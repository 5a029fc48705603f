package sqlstore

import "github.com/fleet/fleet/cloud"

// Tables are a store's tables in its dialect, under the code of this
// package.
type Tables interface {
	DeviceTables
	SerialTables
	AlertTables
	PointTables
	PointStateTables
	RuleTables
	PreviewTables
	ClaimTables
	ReleaseTables
	RolloutTables
}

// Services are a store's domain services on its tables: embedded in the
// store, they are its cloud.Store methods Devices, Serial, Alerts and
// Observe.
type Services struct {
	devices  *DeviceService
	serial   *SerialService
	alerts   *AlertService
	points   *PointService
	rules    *RuleService
	claims   *ClaimService
	releases *ReleaseService
	rollouts *RolloutService
}

// NewServices returns the services on t.
func NewServices(t Tables) Services {
	return Services{devices: &DeviceService{Tables: t}, serial: &SerialService{Tables: t}, alerts: &AlertService{Tables: t},
		points: &PointService{Tables: t}, rules: &RuleService{Tables: t},
		claims: &ClaimService{Tables: t}, releases: &ReleaseService{Tables: t}, rollouts: &RolloutService{Tables: t}}
}

// Devices returns the device service.
func (s *Services) Devices() cloud.DeviceService { return s.devices }

// Serial returns the serial service.
func (s *Services) Serial() cloud.SerialService { return s.serial }

// Alerts returns the alert service.
func (s *Services) Alerts() cloud.AlertService { return s.alerts }

// Points returns the point service.
func (s *Services) Points() cloud.PointService { return s.points }

// Observe sets the observers of the services returned by Serial and
// Alerts; alerts also hears of the alerts a rule change resolves.
func (s *Services) Observe(config cloud.DesiredConfigObserver, alerts cloud.AlertObserver) {
	s.serial.Observer = config
	s.alerts.Observer = alerts
	s.rules.Alerts = alerts
}

// Rules returns the rule service.
func (s *Services) Rules() cloud.RuleService { return s.rules }

// ObserveRules sets the observer of the rule service's changes.
func (s *Services) ObserveRules(o cloud.RulesObserver) {
	s.rules.Observer = o
	s.devices.Rules = o
}

// Claims returns the claim service.
func (s *Services) Claims() cloud.ClaimService { return s.claims }

// Releases returns the release service.
func (s *Services) Releases() cloud.ReleaseService { return s.releases }

// Rollouts returns the rollout service.
func (s *Services) Rollouts() cloud.RolloutService { return s.rollouts }

// ObserveCommands sets the observer of the commands the rollout service
// gives devices.
func (s *Services) ObserveCommands(o cloud.CommandsObserver) { s.rollouts.Observer = o }
