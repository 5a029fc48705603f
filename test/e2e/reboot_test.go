package e2e_test

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fakelogind"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

// TestRebootThroughLogind: POST /devices/{id}/reboot answers 202 and the
// agent asks logind to reboot. The agent runs as the unprivileged user
// nobody (it could not reboot this machine, where tests run as root with
// CAP_SYS_BOOT) on a private D-Bus system bus (a dbus-daemon of the test,
// DBUS_SYSTEM_BUS_ADDRESS) where the test serves a fake logind: the
// device is REBOOTING and the fake logind got one Reboot call
// (test/rig/fakelogind).
func TestRebootThroughLogind(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir := t.TempDir()
	// nobody must reach its binary and state directory (t.TempDir makes a
	// directory and one inside, both 0700).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logind := fakelogind.Start(t)

	env := []string{"FLEET_DB=" + filepath.Join(dir, "fleet.db")}
	ten := fleetproc.Provision(t, bins.relay, env, "Reboot", 1)
	_, base := serveRelay(t, dir, env)
	api := fleetproc.NewAPI(t, base, ten.Key)
	bin := fleetproc.CopyAgent(t, bins.agent, dir)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	dev := ten.Devices[0]
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	fleetproc.StartAs(t, "fleet-agent", filepath.Join(dir, "agent.log"), []string{"FLEET_TOKEN=" + dev.Token, "DBUS_SYSTEM_BUS_ADDRESS=" + logind.Address},
		cred, bin, append(fleetproc.AgentFlags(state, base), "--name", "gw-reboot")...)
	api.WaitStatus([]string{dev.ID}, "ONLINE", 30*time.Second)

	var acc struct{ Data cloud.RebootAccepted }
	if code := api.Do("POST", "/devices/"+dev.ID+"/reboot", nil, &acc); code != 202 || acc.Data.CommandID == "" || acc.Data.DeviceID != dev.ID {
		t.Fatalf("POST /devices/%s/reboot: %d %+v, want 202 with the command", dev.ID, code, acc.Data)
	}
	api.WaitStatus([]string{dev.ID}, string(resource.StatusRebooting), 20*time.Second)
	fleetproc.Eventually(t, 20*time.Second, func() string {
		if calls := logind.Reboots(); len(calls) != 1 {
			return fmt.Sprintf("the fake logind got %d Reboot calls, want 1", len(calls))
		}
		return ""
	})
	// The command is taken once: the agent asks for no second reboot when
	// the relay sends its unfinished commands again after a reconnect.
	time.Sleep(3 * time.Second)
	if calls := logind.Reboots(); len(calls) != 1 {
		t.Errorf("the fake logind got %d Reboot calls, want 1", len(calls))
	}
}
