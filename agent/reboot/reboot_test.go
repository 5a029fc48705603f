package reboot_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/agent/reboot"
	"github.com/fleet/fleet/test/rig/fakelogind"
)

// TestLogindRebootOnAPrivateBus: Reboot calls logind's Manager.Reboot,
// not interactive, on the bus DBUS_SYSTEM_BUS_ADDRESS names (a private one
// with a fake logind: never the real one), and returns logind's refusal.
func TestLogindRebootOnAPrivateBus(t *testing.T) {
	bus := fakelogind.Start(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Address)
	var r reboot.Rebooter = reboot.Logind{}
	if err := r.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := bus.Reboots(); !slices.Equal(got, []bool{false}) {
		t.Fatalf("Reboot calls (interactive) = %v, want [false]", got)
	}
	bus.Refuse("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired")
	err := r.Reboot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Interactive authentication required") {
		t.Fatalf("refused reboot: %v", err)
	}
	if n := len(bus.Reboots()); n != 2 {
		t.Fatalf("%d calls", n)
	}
}

// TestLogindRebootWithoutABus: no bus at the address is an error, in time.
func TestLogindRebootWithoutABus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+t.TempDir()+"/none")
	if err := (reboot.Logind{}).Reboot(context.Background()); err == nil || !strings.Contains(err.Error(), "system bus") {
		t.Fatalf("err = %v", err)
	}
}
