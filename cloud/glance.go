package cloud

import (
	"context"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// DeviceGlance is what the fleet page shows of one device at a glance and
// what the panel's live updates push for it (the "fleet" and "device" live
// events carry these as JSON).
type DeviceGlance struct {
	ID     string                `json:"id"`
	Status resource.DeviceStatus `json:"status"`
	// LastSeen is when the relay last heard from the device; nil: never.
	LastSeen *time.Time `json:"lastSeen"`
	// CPU, Memory and Disk are the latest stored metric sample's cpuPct,
	// memPct and diskUsedPct; nil when the device has reported none.
	CPU    *float64 `json:"cpuPct"`
	Memory *float64 `json:"memPct"`
	Disk   *float64 `json:"diskUsedPct"`
	// OpenAlerts counts the device's open alerts (acknowledged or not);
	// Worst is the highest severity among them, "" when there are none.
	OpenAlerts int               `json:"openAlerts"`
	Worst      resource.Severity `json:"worst,omitempty"`
}

// FleetSummary is the fleet page's overview strip: the organization's
// devices by status and its open alerts by severity (every status and
// severity present, zero included).
type FleetSummary struct {
	Devices    map[resource.DeviceStatus]int `json:"devices"`
	OpenAlerts map[resource.Severity]int     `json:"openAlerts"`
}

// DeviceSort orders the fleet table.
type DeviceSort string

const (
	// SortDefault: oldest device first (the table's order until now).
	SortDefault DeviceSort = ""
	// SortWorst: worst first: the worst open alert's severity, then the
	// number of open alerts, then OFFLINE before DEGRADED before ONLINE,
	// then the oldest last seen; ties oldest device first.
	SortWorst DeviceSort = "worst"
)

// FleetGlance is what the fleet page and the live updates read at a
// glance. Every method is scoped to orgID: another organization's device
// is absent from the answer.
type FleetGlance interface {
	// Glance returns the devices ids of orgID at a glance, keyed by id;
	// ids unknown to orgID are left out.
	Glance(ctx context.Context, orgID string, ids []string) (map[string]DeviceGlance, error)
	// FleetSummary counts orgID's devices by status and open alerts by
	// severity.
	FleetSummary(ctx context.Context, orgID string) (FleetSummary, error)
}
