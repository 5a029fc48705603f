// Package reboot asks the system to reboot: logind's
// org.freedesktop.login1.Manager.Reboot over the system D-Bus
// (github.com/godbus/dbus/v5), which a polkit rule the .deb installs allows
// for the agent's user. Tests point it at a private bus with a fake logind
// (DBUS_SYSTEM_BUS_ADDRESS): never at the real one (tests run as root with
// CAP_SYS_BOOT).
package reboot

import (
	"context"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"
)

// Rebooter reboots the machine.
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// logind's names on the system bus.
const (
	Service   = "org.freedesktop.login1"
	Path      = dbus.ObjectPath("/org/freedesktop/login1")
	Interface = "org.freedesktop.login1.Manager"
	Method    = Interface + ".Reboot"
)

// DefaultTimeout bounds a reboot request when the context has no deadline.
const DefaultTimeout = 25 * time.Second

// Logind reboots through systemd-logind on the system bus (the address in
// DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket). The call is
// Reboot(false): not interactive, so polkit decides from its rules alone
// (the .deb's allows it for the agent's user) and never prompts.
type Logind struct {
	// Timeout bounds the call (DefaultTimeout when 0) when ctx has no
	// earlier deadline.
	Timeout time.Duration
}

// Reboot asks logind to reboot. It returns once logind accepted (the
// system then stops every service, this agent included) or with logind's
// refusal (polkit's "Interactive authentication required." when no rule
// allows it).
func (l Logind) Reboot(ctx context.Context) error {
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A connection of its own (not the process-wide shared one): it is
	// closed here, and a test's private bus is read from the environment
	// at each call.
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reboot: system bus: %w", err)
	}
	defer conn.Close()
	call := conn.Object(Service, Path).CallWithContext(ctx, Method, 0, false)
	if call.Err != nil {
		return fmt.Errorf("reboot: %s: %w", Method, call.Err)
	}
	return nil
}
