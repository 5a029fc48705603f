// Package fakelogind runs a private D-Bus daemon (the system's
// dbus-daemon binary, on a socket of its own) on which it owns
// org.freedesktop.login1 and exports a fake Manager whose Reboot records
// the call instead of rebooting. Tests that reboot point
// DBUS_SYSTEM_BUS_ADDRESS at it (Bus.Address): never at the real logind,
// since tests run as root with CAP_SYS_BOOT.
package fakelogind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// config is the private bus's configuration: anyone may connect, own a
// name and send anything (the socket's directory is open to every user,
// so that an agent run as an unprivileged user reaches it too).
const config = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// Bus is a private bus with a fake logind on it.
type Bus struct {
	// Address is the bus's address, for DBUS_SYSTEM_BUS_ADDRESS.
	Address string
	m       *manager
}

// manager is the exported org.freedesktop.login1.Manager.
type manager struct {
	mu     sync.Mutex
	calls  []bool // Reboot's interactive argument, per call
	refuse string // the D-Bus error name Reboot answers with ("": none)
}

// Reboot records the call; it refuses it as polkit would when told to.
func (m *manager) Reboot(interactive bool) *dbus.Error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, interactive)
	if m.refuse != "" {
		return dbus.NewError(m.refuse, []any{"Interactive authentication required."})
	}
	return nil
}

// Start starts the bus and the fake logind on it, both stopped when tb
// ends.
func Start(tb testing.TB) *Bus {
	tb.Helper()
	dir, err := os.MkdirTemp("", "fakelogind-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, filepath.Join(dir, "bus")), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+cfg, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("dbus-daemon: %v", err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	b := &Bus{m: &manager{}}
	select {
	case b.Address = <-addr:
	case <-time.After(10 * time.Second):
		tb.Fatal("dbus-daemon printed no address within 10s")
	}
	if b.Address == "" {
		tb.Fatal("dbus-daemon printed no address")
	}
	conn, err := dbus.Connect(b.Address)
	if err != nil {
		tb.Fatalf("connect to the private bus: %v", err)
	}
	tb.Cleanup(func() { conn.Close() })
	if err := conn.Export(b.m, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		tb.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		tb.Fatalf("own org.freedesktop.login1 on the private bus: %v (reply %d)", err, reply)
	}
	return b
}

// Refuse makes every later Reboot answer the D-Bus error name (as
// "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" when no
// polkit rule allows it); "" accepts again.
func (b *Bus) Refuse(name string) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	b.m.refuse = name
}

// Reboots returns the interactive argument of each Reboot call so far.
func (b *Bus) Reboots() []bool {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	return append([]bool(nil), b.m.calls...)
}
