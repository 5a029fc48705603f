package agentlink_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// recvCommand reads messages until a command comes, or fails.
func (a *agent) recvCommand() protocol.Command {
	a.t.Helper()
	for {
		m := a.recv()
		if m.Type == protocol.TypeCommand && m.Command != nil {
			return *m.Command
		}
		if m.Type != protocol.TypeConfig {
			a.t.Fatalf("want a command, got %+v", m)
		}
	}
}

// noCommand fails when a command comes within d (the read's timeout then
// closes the connection).
func (a *agent) noCommand(d time.Duration) {
	a.t.Helper()
	for {
		m, err := a.recvTimeout(d)
		if err != nil {
			return
		}
		if m.Type == protocol.TypeCommand {
			a.t.Fatalf("unexpected command %+v", m.Command)
		}
	}
}

func (a *agent) commandStatus(st protocol.CommandStatus) {
	a.t.Helper()
	a.send(protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &st})
}

func TestCommandsReachTheAgent(t *testing.T) { forCodecs(t, testCommandsReachTheAgent) }

// testCommandsReachTheAgent: a reboot queued through the API's service
// reaches the connected agent at once, is sent again after every welcome
// until the agent reports it finished, and the agent's report sets the
// device REBOOTING (one status change, whatever the heartbeats say
// after); a report on an unknown command changes nothing and keeps the
// connection.
func testCommandsReachTheAgent(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	a.heartbeat(protocol.Heartbeat{})
	e.waitStatus(id, "ONLINE")
	acc, err := e.s.Store.Rollouts().RebootDevice(context.Background(), e.org.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	cmd := a.recvCommand()
	if cmd.ID != acc.CommandID || cmd.Kind != protocol.CommandReboot || protocol.CheckCommand(&cmd) != nil {
		t.Fatalf("command %+v, queued %+v", cmd, acc)
	}
	// Not finished: sent again after the next welcome.
	a.commandStatus(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandAccepted, Version: "1.0.0"})
	a.ws.CloseNow()
	a, _ = e.connect(tok, hello())
	if again := a.recvCommand(); again.ID != cmd.ID {
		t.Fatalf("resent %+v", again)
	}
	a.commandStatus(protocol.CommandStatus{ID: "unknown-command", State: protocol.CommandFailed})
	a.commandStatus(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandRebooting, Version: "1.0.0"})
	e.waitStatus(id, "REBOOTING")
	beats := e.obs.heartbeatCount(id)
	a.heartbeat(protocol.Heartbeat{Status: resource.StatusRebooting})
	a.heartbeat(protocol.Heartbeat{Status: resource.StatusRebooting})
	eventually(t, 5*time.Second, func() string {
		if n := e.obs.heartbeatCount(id); n < beats+2 {
			return "heartbeats stored: " + strings.Repeat("+", n-beats)
		}
		return ""
	})
	if got := e.obs.statusList(id); !slices.Contains(got, "ONLINE>REBOOTING") || slices.Index(got, "ONLINE>REBOOTING") != len(got)-1 {
		t.Errorf("status changes heard %v: want ONLINE>REBOOTING once, last", got)
	}
	if n := e.countEvents(id, protocol.EventDeviceStatusChanged, func(ev resource.Event) bool { return strings.Contains(string(ev.Data), `"to":"REBOOTING"`) }); n != 1 {
		t.Errorf("%d device.status_changed events to REBOOTING, want 1", n)
	}
	// Finished: not sent again.
	a.ws.CloseNow()
	a, _ = e.connect(tok, hello())
	a.noCommand(300 * time.Millisecond)
}

// TestCommandsOfAnotherRelay: a command queued through another handle on
// the store (another relay of a cluster, whose store then raises the
// device's configuration notification) reaches the agent through
// DesiredConfigChanged.
func TestCommandsOfAnotherRelay(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		s := open(t, nil)
		e := newEnvOn(t, s, nil)
		id, tok := e.addDevice("IG-500")
		a, _ := e.connect(tok, hello())
		a.heartbeat(protocol.Heartbeat{})
		e.waitStatus(id, "ONLINE")
		other := s.Reopen(t)
		acc, err := other.Store.Rollouts().RebootDevice(context.Background(), e.org.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		// Nobody told this relay (the other handle has no observer): the
		// cluster's notification does.
		e.srv.DesiredConfigChanged(id)
		if cmd := a.recvCommand(); cmd.ID != acc.CommandID {
			t.Fatalf("command %+v, want %s", cmd, acc.CommandID)
		}
	})
}

// TestCommandStatusOutOfBoundsClosesTheConnection: a status out of the
// protocol's bounds is a protocol error naming the field.
func TestCommandStatusOutOfBoundsClosesTheConnection(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e := newEnv(t, open, nil)
		_, tok := e.addDevice("IG-500")
		a, _ := e.connect(tok, hello())
		a.commandStatus(protocol.CommandStatus{ID: "c1", State: "done"})
		if ce := a.expectClose(5 * time.Second); ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "commandStatus.state") {
			t.Fatalf("close %d %q", ce.Code, ce.Reason)
		}
		b, _ := e.connect(tok, hello())
		b.send(protocol.Message{Type: protocol.TypeCommand, Command: &protocol.Command{ID: "c2", Kind: protocol.CommandReboot}})
		if ce := b.expectClose(5 * time.Second); ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "relay-to-agent") {
			t.Fatalf("close %d %q", ce.Code, ce.Reason)
		}
	})
}

func (r *recorder) heartbeatCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.heartbeats[id])
}

// waitStatus waits until the device's status is want.
func (e *env) waitStatus(id, want string) {
	e.t.Helper()
	eventually(e.t, 5*time.Second, func() string {
		if s := e.device(id).Status; s != want {
			return "status " + s + ", want " + want
		}
		return ""
	})
}
