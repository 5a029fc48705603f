package resource

// Rollouts (issue 28): an agent version rolled out to a scope of devices in
// cumulative waves (DESIGN.md "Agent updates with staged rollout and
// automatic rollback"). Public API: POST/GET /rollouts, GET
// /rollouts/{id}, POST /rollouts/{id}/pause|resume|cancel.

// Rollout states.
const (
	RolloutRunning   = "running"
	RolloutPaused    = "paused"
	RolloutCompleted = "completed" // every device of the last wave healthy or failed within maxFailures
	RolloutStopped   = "stopped"   // failures exceeded maxFailures
	RolloutCanceled  = "canceled"
)

// Per-device rollout states.
const (
	RolloutDevicePending     = "pending" // not started: its wave has not come, or it was sent and not yet taken
	RolloutDeviceDownloading = "downloading"
	RolloutDeviceInstalling  = "installing"
	RolloutDeviceHealthy     = "healthy"
	RolloutDeviceFailed      = "failed"
	RolloutDeviceRolledBack  = "rolled_back"
	RolloutDeviceSkipped     = "skipped" // canceled before it started
)

// RolloutScope names the devices of a rollout: DeviceIDs, or Tags (every
// tag must match, as GET /devices?tag=), or neither for every device of the
// organization. The scope is resolved when the rollout is created.
type RolloutScope struct {
	DeviceIDs []string `json:"deviceIds,omitempty"`
	Tags      []string `json:"tags,omitempty"`
}

// NewRollout is the body of POST /rollouts.
type NewRollout struct {
	Version string       `json:"version"`
	Scope   RolloutScope `json:"scope"`
	// Waves are cumulative percentages of the scope's devices, increasing,
	// the last 100 (default [100]).
	Waves []int `json:"waves,omitempty"`
	// MaxFailures is how many devices may fail (failed or rolled back)
	// before the rollout stops itself (default 0).
	MaxFailures *int `json:"maxFailures,omitempty"`
	// HealthFor is how long the new agent must stay healthy before it is
	// kept (Go duration, 10s..1h, default "2m").
	HealthFor string `json:"healthFor,omitempty"`
}

// Rollout is an item of GET /rollouts.
type Rollout struct {
	ID          string       `json:"id"`
	Version     string       `json:"version"`
	Scope       RolloutScope `json:"scope"`
	Waves       []int        `json:"waves"`
	MaxFailures int          `json:"maxFailures"`
	HealthFor   string       `json:"healthFor"`
	State       string       `json:"state"`
	// Wave is the index (0-based) of the wave running now, or of the last
	// one when the rollout ended.
	Wave int `json:"wave"`
	// Counts are the devices by per-device state.
	Counts    map[string]int `json:"counts"`
	Total     int            `json:"total"`
	CreatedAt Time           `json:"createdAt"`
	UpdatedAt Time           `json:"updatedAt"`
	// Reason says why a stopped rollout stopped.
	Reason *string `json:"reason"`
}

// RolloutDevice is one device's part in a rollout.
type RolloutDevice struct {
	DeviceID   string `json:"deviceId"`
	DeviceName string `json:"deviceName"`
	Wave       int    `json:"wave"`
	State      string `json:"state"`
	// FromVersion is the agent version the device ran when its wave
	// started ("" before).
	FromVersion string  `json:"fromVersion"`
	Error       *string `json:"error"`
	UpdatedAt   Time    `json:"updatedAt"`
}

// RolloutDetail is the body of GET /rollouts/{id}.
type RolloutDetail struct {
	Rollout
	Devices []RolloutDevice `json:"devices"`
}
