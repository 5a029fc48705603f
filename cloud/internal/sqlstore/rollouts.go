package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Rollouts and device commands (issue 28): cloud.RolloutService and
// cloud.CommandStore on RolloutTables, written once for both stores
// (rollouttables.go: the public API's queries; commands.go: the agent
// endpoint's and the rollout engine's).

// RolloutTables are the rollout and command queries, in the store's
// dialect, each scoped to the organization.
type RolloutTables interface {
	// InsertRollout resolves c's scope in the organization (EINVALID
	// naming version or the scope when there is no release of the version
	// or no such device) and stores the rollout running with its devices
	// in waves; it returns its id.
	InsertRollout(ctx context.Context, orgID string, c cloud.CheckedRollout) (string, error)
	// RolloutPage reads a page of a list of rollouts.
	RolloutPage(ctx context.Context, k Keyset[resource.Rollout]) (resource.List[resource.Rollout], error)
	// RolloutDetail reads the organization's rollout id, or ENOTFOUND.
	RolloutDetail(ctx context.Context, orgID, id string) (resource.RolloutDetail, error)
	// MoveRollout pauses, resumes or cancels the organization's rollout
	// id (ECONFLICT from a state that does not allow it, ENOTFOUND).
	MoveRollout(ctx context.Context, orgID, id, action string) error
	// QueueReboot queues a reboot command for the organization's device
	// (cloud.RolloutService's RebootDevice); queued is false when one
	// already waited.
	QueueReboot(ctx context.Context, orgID, deviceID string) (a cloud.RebootAccepted, queued bool, err error)
	// OpenCommands, StoreCommandStatus and StepRollouts are
	// cloud.CommandStore's PendingCommands, CommandStatus and
	// AdvanceRollouts.
	OpenCommands(ctx context.Context, dev cloud.AgentDevice) ([]protocol.Command, error)
	StoreCommandStatus(ctx context.Context, dev cloud.AgentDevice, st protocol.CommandStatus, at time.Time) error
	StepRollouts(ctx context.Context, now time.Time) ([]string, error)
}

// RolloutService implements cloud.RolloutService.
type RolloutService struct {
	Tables   Tables
	Observer cloud.CommandsObserver
}

var _ cloud.RolloutService = (*RolloutService)(nil)

// CreateRollout implements cloud.RolloutService: nr checked
// (cloud.CheckNewRollout, then the store), stored running; the engine's
// next step starts its first wave.
func (s *RolloutService) CreateRollout(ctx context.Context, orgID string, nr resource.NewRollout) (resource.RolloutDetail, error) {
	c, err := cloud.CheckNewRollout(nr)
	if err != nil {
		return resource.RolloutDetail{}, err
	}
	id, err := s.Tables.InsertRollout(ctx, orgID, c)
	if err != nil {
		return resource.RolloutDetail{}, err
	}
	return s.Tables.RolloutDetail(ctx, orgID, id)
}

// ListRollouts implements cloud.RolloutService: newest first,
// keyset-paginated.
func (s *RolloutService) ListRollouts(ctx context.Context, orgID string, p cloud.Page) (resource.List[resource.Rollout], error) {
	return s.Tables.RolloutPage(ctx, RolloutList(orgID, p))
}

// Rollout implements cloud.RolloutService.
func (s *RolloutService) Rollout(ctx context.Context, orgID, id string) (resource.RolloutDetail, error) {
	return s.Tables.RolloutDetail(ctx, orgID, id)
}

// ActRollout implements cloud.RolloutService.
func (s *RolloutService) ActRollout(ctx context.Context, orgID, id, action string) (resource.RolloutDetail, error) {
	switch action {
	case "pause", "resume", "cancel":
	default:
		return resource.RolloutDetail{}, cloud.Errorf(cloud.EINVALID, "action: %q is not pause, resume or cancel", action)
	}
	if err := s.Tables.MoveRollout(ctx, orgID, id, action); err != nil {
		return resource.RolloutDetail{}, err
	}
	return s.Tables.RolloutDetail(ctx, orgID, id)
}

// RebootDevice implements cloud.RolloutService; the observer hears of a
// new command once it is stored.
func (s *RolloutService) RebootDevice(ctx context.Context, orgID, deviceID string) (cloud.RebootAccepted, error) {
	a, queued, err := s.Tables.QueueReboot(ctx, orgID, deviceID)
	if err != nil {
		return cloud.RebootAccepted{}, err
	}
	if queued && s.Observer != nil {
		s.Observer.CommandsChanged(deviceID)
	}
	return a, nil
}

// CommandStore implements cloud.CommandStore.
type CommandStore struct{ Tables Tables }

var _ cloud.CommandStore = (*CommandStore)(nil)

// PendingCommands implements cloud.CommandStore.
func (s *CommandStore) PendingCommands(ctx context.Context, dev cloud.AgentDevice) ([]protocol.Command, error) {
	return s.Tables.OpenCommands(ctx, dev)
}

// CommandStatus implements cloud.CommandStore.
func (s *CommandStore) CommandStatus(ctx context.Context, dev cloud.AgentDevice, st protocol.CommandStatus, at time.Time) error {
	return s.Tables.StoreCommandStatus(ctx, dev, st, at)
}

// AdvanceRollouts implements cloud.CommandStore.
func (s *CommandStore) AdvanceRollouts(ctx context.Context, now time.Time) ([]string, error) {
	return s.Tables.StepRollouts(ctx, now)
}
