// Package reboot asks the system to reboot: logind's
// org.freedesktop.login1.Manager.Reboot over the system D-Bus
// (github.com/godbus/dbus/v5), which a polkit rule the .deb installs allows
// for the agent's user. Tests point it at a private bus with a fake logind:
// never at the real one (tests run as root with CAP_SYS_BOOT).
//
// CONTRACT SKELETON: the agentcmd lane implements it.
package reboot

import "context"

// Rebooter reboots the machine.
type Rebooter interface {
	Reboot(ctx context.Context) error
}
