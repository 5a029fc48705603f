package cloud

import (
	"slices"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// CommandDeviceStatus is the device status an agent's report (state) of a
// command of kind moves the device to from status ("" for none): UPDATING
// while an update downloads and installs, REBOOTING on rebooting, and back
// to ONLINE from those once the command ends. CommandStore.CommandStatus
// stores it; the agent endpoint holding the connection follows it, so that
// the agent's next heartbeat (which reports the same) is no change.
func CommandDeviceStatus(kind, state string, status resource.DeviceStatus) resource.DeviceStatus {
	connected := []resource.DeviceStatus{resource.StatusOnline, resource.StatusError, resource.StatusUpdating, resource.StatusRebooting}
	done := []string{protocol.CommandHealthy, protocol.CommandFailed, protocol.CommandRolledBack, protocol.CommandRebooting}
	switch {
	case !slices.Contains(connected, status):
		return ""
	case kind == protocol.CommandUpdate && (state == protocol.CommandDownloading || state == protocol.CommandInstalling):
		return resource.StatusUpdating
	case kind == protocol.CommandReboot && state == protocol.CommandRebooting:
		return resource.StatusRebooting
	case kind == protocol.CommandUpdate && slices.Contains(done, state) && status == resource.StatusUpdating,
		kind == protocol.CommandReboot && state == protocol.CommandFailed && status == resource.StatusRebooting:
		return resource.StatusOnline
	}
	return ""
}
