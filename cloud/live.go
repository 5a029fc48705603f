package cloud

import (
	"context"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// LiveState is what the panel's live updates (issue 29) compare from one
// read to the next to find what changed in an organization: every device's
// status and last seen, the open alerts, and for the devices open on a
// device page (watched) a fingerprint of their channel and point values and
// their newest event. It is read whole from the store each time, so a
// change made by any relay or process shows at the next read, whatever the
// clocks of those who wrote it.
type LiveState struct {
	Devices    map[string]LiveDevice
	OpenAlerts map[string]LiveAlert
	Watched    map[string]LiveWatched
}

// LiveDevice is a device's row of LiveState. A heartbeat moves LastSeen
// (and stores metrics with it), so a changed LastSeen also says the
// latest metrics may have changed.
type LiveDevice struct {
	Status   resource.DeviceStatus
	LastSeen time.Time // zero: never seen
}

// LiveAlert is an open alert of LiveState.
type LiveAlert struct {
	DeviceID string
	State    resource.AlertState
	Severity resource.Severity
}

// LiveWatched is a watched device's part of LiveState: Channels is a hash
// of its channels' reported state (availability, live value, transmit,
// error, points); NewestEvent the id of its newest event ("" without).
type LiveWatched struct {
	Channels    uint64
	NewestEvent string
}

// MaxLiveWatched bounds the devices one LiveState read watches.
const MaxLiveWatched = 1000

// LiveReader reads LiveState for the panel's live updates. It is scoped to
// orgID: another organization's devices are absent, watched ones included.
type LiveReader interface {
	LiveState(ctx context.Context, orgID string, watched []string) (LiveState, error)
}
