package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Rollouts and device commands (issue 28, lane rollouts):
// cloud.RolloutService and cloud.CommandStore on RolloutTables, written
// once for both stores. CONTRACT STUB: the rollouts lane replaces it.

// RolloutTables are the rollout and command queries.
type RolloutTables interface{}

// RolloutService implements cloud.RolloutService.
type RolloutService struct {
	Tables   Tables
	Observer cloud.CommandsObserver
}

// CreateRollout implements cloud.RolloutService.
func (s *RolloutService) CreateRollout(ctx context.Context, orgID string, nr resource.NewRollout) (resource.RolloutDetail, error) {
	return resource.RolloutDetail{}, errStub
}

// ListRollouts implements cloud.RolloutService.
func (s *RolloutService) ListRollouts(ctx context.Context, orgID string, p cloud.Page) (resource.List[resource.Rollout], error) {
	return resource.List[resource.Rollout]{}, errStub
}

// Rollout implements cloud.RolloutService.
func (s *RolloutService) Rollout(ctx context.Context, orgID, id string) (resource.RolloutDetail, error) {
	return resource.RolloutDetail{}, errStub
}

// ActRollout implements cloud.RolloutService.
func (s *RolloutService) ActRollout(ctx context.Context, orgID, id, action string) (resource.RolloutDetail, error) {
	return resource.RolloutDetail{}, errStub
}

// RebootDevice implements cloud.RolloutService.
func (s *RolloutService) RebootDevice(ctx context.Context, orgID, deviceID string) (cloud.RebootAccepted, error) {
	return cloud.RebootAccepted{}, errStub
}

// CommandStore implements cloud.CommandStore.
type CommandStore struct{ Tables Tables }

// PendingCommands implements cloud.CommandStore.
func (s *CommandStore) PendingCommands(ctx context.Context, dev cloud.AgentDevice) ([]protocol.Command, error) {
	return nil, nil
}

// CommandStatus implements cloud.CommandStore.
func (s *CommandStore) CommandStatus(ctx context.Context, dev cloud.AgentDevice, st protocol.CommandStatus, at time.Time) error {
	return nil
}

// AdvanceRollouts implements cloud.CommandStore.
func (s *CommandStore) AdvanceRollouts(ctx context.Context, now time.Time) ([]string, error) {
	return nil, nil
}
