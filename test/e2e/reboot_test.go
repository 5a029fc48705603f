package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

// TestRebootThroughLogind: POST /devices/{id}/reboot answers 202 and the
// agent asks logind to reboot. The agent runs as the unprivileged user
// nobody (it could not reboot this machine, where tests run as root with
// CAP_SYS_BOOT) on a private D-Bus system bus (a dbus-daemon of the test,
// DBUS_SYSTEM_BUS_ADDRESS) where the test serves a fake logind: the
// device is REBOOTING and the fake logind got one Reboot call, from the
// agent's user.
func TestRebootThroughLogind(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir := t.TempDir()
	// nobody must reach its binary, state directory and the bus socket
	// (t.TempDir makes a directory and one inside, both 0700).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bus := startPrivateBus(t, dir)
	logind := serveFakeLogind(t, bus)

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
	fleetproc.StartAs(t, "fleet-agent", filepath.Join(dir, "agent.log"), []string{"FLEET_TOKEN=" + dev.Token, "DBUS_SYSTEM_BUS_ADDRESS=" + bus},
		cred, bin, append(fleetproc.AgentFlags(state, base), "--name", "gw-reboot")...)
	api.WaitStatus([]string{dev.ID}, "ONLINE", 30*time.Second)

	var acc struct{ Data cloud.RebootAccepted }
	if code := api.Do("POST", "/devices/"+dev.ID+"/reboot", nil, &acc); code != 202 || acc.Data.CommandID == "" || acc.Data.DeviceID != dev.ID {
		t.Fatalf("POST /devices/%s/reboot: %d %+v, want 202 with the command", dev.ID, code, acc.Data)
	}
	api.WaitStatus([]string{dev.ID}, string(resource.StatusRebooting), 20*time.Second)
	fleetproc.Eventually(t, 20*time.Second, func() string {
		if calls := logind.got(); len(calls) != 1 {
			return fmt.Sprintf("the fake logind got %d Reboot calls, want 1", len(calls))
		}
		return ""
	})
	if c := logind.got()[0]; c.uid != uint32(uid) {
		t.Errorf("Reboot called by uid %d, want the agent's user %d", c.uid, uid)
	}
	// The command is taken once: the agent asks for no second reboot when
	// the relay sends its unfinished commands again after a reconnect.
	time.Sleep(3 * time.Second)
	if calls := logind.got(); len(calls) != 1 {
		t.Errorf("the fake logind got %d Reboot calls, want 1", len(calls))
	}
}

// startPrivateBus runs a dbus-daemon on a socket in dir that any local
// user may connect to, and returns its address.
func startPrivateBus(t *testing.T, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "system_bus_socket")
	cfg := filepath.Join(dir, "bus.conf")
	conf := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>fleet-test</type>
  <listen>unix:path=` + sock + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--nofork", "--nopidfile", "--print-address", "--config-file="+cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("dbus-daemon: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			addr <- strings.TrimSpace(sc.Text())
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok || a == "" {
			t.Fatal("dbus-daemon printed no address")
		}
		if err := os.Chmod(sock, 0o666); err != nil {
			t.Fatal(err)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon did not start within 10s")
	}
	return ""
}

// fakeLogind is org.freedesktop.login1 on a test's private bus: it
// records Reboot calls and reboots nothing.
type fakeLogind struct {
	conn  *dbus.Conn
	mu    sync.Mutex
	calls []rebootCall
}

type rebootCall struct {
	interactive bool
	uid         uint32 // the caller's, ^0 when the bus could not say
}

func serveFakeLogind(t *testing.T, addr string) *fakeLogind {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the private bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	l := &fakeLogind{conn: conn}
	if err := conn.Export(l, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.login1 on the private bus: %v %v", reply, err)
	}
	return l
}

// Reboot is logind's Manager.Reboot(b interactive); it asks the bus for
// the caller's uid (godbus runs each call on a goroutine of its own).
func (l *fakeLogind) Reboot(sender dbus.Sender, interactive bool) *dbus.Error {
	uid := ^uint32(0)
	l.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, string(sender)).Store(&uid)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, rebootCall{interactive: interactive, uid: uid})
	return nil
}

func (l *fakeLogind) got() []rebootCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rebootCall(nil), l.calls...)
}
