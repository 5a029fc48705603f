//go:build cgo

// The relay's store (SQLite) needs cgo: the gateway cross builds (make
// test-cross, CGO_ENABLED=0) leave this test out.

package agent

import (
	"context"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/fakelogind"
	"github.com/fleet/fleet/test/rig/linktest"
)

// TestRebootEndToEndWithTheRealRelay: the agent against the relay's real
// agent endpoint on a real store (SQLite): a reboot queued through the
// store's service (what POST /devices/{id}/reboot calls) reaches the
// agent at once, the device becomes REBOOTING, logind (a fake one on a
// private bus) is asked once, and the command is finished: an agent
// started again after the "reboot" gets no command and asks nothing.
func TestRebootEndToEndWithTheRealRelay(t *testing.T) {
	bus := fakelogind.Start(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Address)
	s := dialects.SQLite(t, nil)
	org := storetest.Org(t, s.Store, "Acme")
	dev, tok := storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN-R1", Model: "IG-500"})
	srv, base := linktest.Serve(t, agentlink.Config{Store: s.Agent, Commands: s.Commands})
	s.Store.ObserveCommands(srv)

	status := func() resource.DeviceStatus {
		d, err := s.Store.Devices().Device(context.Background(), org.ID, dev.ID)
		if err != nil {
			t.Fatal(err)
		}
		return d.Status
	}
	state := t.TempDir()
	cfg := testConfig(t, base, state)
	cfg.Token = tok
	_, stop := startAgentWith(t, cfg, Options{})
	waitFor(t, "ONLINE", func() bool { return status() == resource.StatusOnline })

	acc, err := s.Store.Rollouts().RebootDevice(context.Background(), org.ID, dev.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "logind asked", func() bool { return len(bus.Reboots()) == 1 })
	waitFor(t, "REBOOTING", func() bool { return status() == resource.StatusRebooting })
	stop()
	if pending, err := s.Commands.PendingCommands(context.Background(), cloud.AgentDevice{ID: dev.ID, OrgID: org.ID, Model: "IG-500"}); err != nil || len(pending) != 0 {
		t.Fatalf("command %s still pending after rebooting: %+v %v", acc.CommandID, pending, err)
	}

	// After the "reboot".
	startAgentWith(t, cfg, Options{})
	waitFor(t, "ONLINE again", func() bool { return status() == resource.StatusOnline })
	time.Sleep(300 * time.Millisecond) // a command, were one sent, would have run by now
	if n := len(bus.Reboots()); n != 1 {
		t.Fatalf("logind asked %d times", n)
	}
}
