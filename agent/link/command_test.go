package link

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/shared/protocol"
)

func (r *relay) statusList() []protocol.CommandStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.statuses)
}

// TestCommandsReachOnCommandAndStatusesTheRelay: each command the relay
// sends reaches OnCommand, again after a reconnect (the relay resends
// unfinished ones after every welcome); a status sent while connected
// reaches the relay, one sent while not is dropped without harm; a command
// without a valid id is dropped before OnCommand.
func TestCommandsReachOnCommandAndStatusesTheRelay(t *testing.T) {
	r := newRelay(t)
	r.commands = []protocol.Command{
		{ID: "bad/id", Kind: protocol.CommandReboot},
		{ID: "cmd-1", Kind: protocol.CommandReboot},
	}
	var got calls[string]
	h := startLink(t, r, nil, func(o *Options) {
		o.OnCommand = func(ctx context.Context, cmd protocol.Command) { got.add(cmd.ID) }
	})
	eventually(t, "command taken", func() bool { return len(got.list()) == 1 })
	// Answered from another goroutine than the link's, as the agent does.
	h.link.SendCommandStatus(protocol.CommandStatus{ID: "cmd-1", State: protocol.CommandAccepted, Version: "test", Error: strings.Repeat("é", 2000)})
	eventually(t, "status at the relay", func() bool { return len(r.statusList()) == 1 })
	if st := r.statusList()[0]; st.ID != "cmd-1" || st.State != protocol.CommandAccepted || len(st.Error) > protocol.MaxCommandError {
		t.Fatalf("status = %+v", st)
	}
	if l := got.list(); !slices.Equal(l, []string{"cmd-1"}) {
		t.Fatalf("OnCommand got %v", l)
	}
	if !strings.Contains(h.logs.String(), "without a valid id") {
		t.Error("the command without an id is not logged")
	}
	if h.link.Relay() != r.srv.URL {
		t.Errorf("Relay() = %q, want %q", h.link.Relay(), r.srv.URL)
	}
	r.dropAll()
	eventually(t, "command sent again after the reconnect", func() bool { return len(got.list()) == 2 })
	h.link.SendCommandStatus(protocol.CommandStatus{ID: "cmd-1", State: protocol.CommandRebooting})
	eventually(t, "second status", func() bool { return len(r.statusList()) == 2 })

	h.stop()
	h.link.SendCommandStatus(protocol.CommandStatus{ID: "cmd-1", State: protocol.CommandRebooting})
	if n := len(r.statusList()); n != 2 {
		t.Fatalf("a status sent while disconnected arrived: %d", n)
	}
}

// TestCommandWithoutOnCommandAnsweredFailed: an agent that takes no
// commands says so rather than leaving the relay waiting.
func TestCommandWithoutOnCommandAnsweredFailed(t *testing.T) {
	r := newRelay(t)
	r.commands = []protocol.Command{{ID: "cmd-2", Kind: protocol.CommandUpdate}}
	startLink(t, r, nil, nil)
	eventually(t, "failed status", func() bool { return len(r.statusList()) == 1 })
	if st := r.statusList()[0]; st.ID != "cmd-2" || st.State != protocol.CommandFailed {
		t.Fatalf("status = %+v", st)
	}
}
