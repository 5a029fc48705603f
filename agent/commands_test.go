package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fakelogind"
	"github.com/fleet/fleet/test/rig/relaystub"
)

// states returns the states of the statuses.
func states(sts []protocol.CommandStatus) []string {
	out := make([]string, len(sts))
	for i, s := range sts {
		out[i] = s.State
	}
	return out
}

// startAgentWith runs an agent with opts until the test ends.
func startAgentWith(t *testing.T, cfg Config, opts Options) (*Agent, func()) {
	t.Helper()
	a, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// TestRebootCommandThroughLogindOnAPrivateBus: a reboot command is
// reported accepted then rebooting, the heartbeats say REBOOTING, and
// logind (a fake one on a private bus: never the real one, tests run as
// root with CAP_SYS_BOOT) is asked once, not interactively. The agent
// started again on the same state directory (as after the reboot) answers
// the relay's resend of the command from its journal and does not reboot
// again.
func TestRebootCommandThroughLogindOnAPrivateBus(t *testing.T) {
	bus := fakelogind.Start(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Address)
	r := relaystub.Start("tok-123")
	defer r.Close()
	r.Commands = []protocol.Command{{ID: "reboot-1", Kind: protocol.CommandReboot}}
	state := t.TempDir()
	cfg := testConfig(t, r.URL, state)
	_, stop := startAgentWith(t, cfg, Options{})

	waitFor(t, "rebooting reported", func() bool { return len(r.StatusesOf("reboot-1")) == 2 })
	if got := states(r.StatusesOf("reboot-1")); !slices.Equal(got, []string{protocol.CommandAccepted, protocol.CommandRebooting}) {
		t.Fatalf("statuses %v", got)
	}
	if v := r.StatusesOf("reboot-1")[1].Version; v != Version {
		t.Errorf("status version %q", v)
	}
	waitFor(t, "logind asked", func() bool { return len(bus.Reboots()) == 1 })
	if bus.Reboots()[0] {
		t.Error("Reboot was asked interactively")
	}
	waitFor(t, "REBOOTING heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusRebooting })
	stop()
	if b, err := os.ReadFile(filepath.Join(state, commandsFile)); err != nil || !strings.Contains(string(b), `"rebooting"`) {
		t.Fatalf("journal: %s %v", b, err)
	}

	// After the "reboot": the relay sends the command again (say it did
	// not hear the status); the agent answers from its journal.
	startAgentWith(t, cfg, Options{})
	waitFor(t, "answered from the journal", func() bool { return len(r.StatusesOf("reboot-1")) == 3 })
	if got := r.StatusesOf("reboot-1")[2].State; got != protocol.CommandRebooting {
		t.Fatalf("resent command answered %q", got)
	}
	waitFor(t, "ONLINE heartbeat after the reboot", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
	if n := len(bus.Reboots()); n != 1 {
		t.Fatalf("logind asked %d times: a command ran twice", n)
	}
}

// TestRebootRefusedReportsFailed: a reboot logind refuses (no polkit rule)
// is reported failed with logind's answer, and the heartbeats go back to
// ONLINE.
func TestRebootRefusedReportsFailed(t *testing.T) {
	bus := fakelogind.Start(t)
	bus.Refuse("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired")
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Address)
	r := relaystub.Start("tok-123")
	defer r.Close()
	r.Commands = []protocol.Command{{ID: "reboot-2", Kind: protocol.CommandReboot}}
	startAgentWith(t, testConfig(t, r.URL, t.TempDir()), Options{})
	waitFor(t, "failed reported", func() bool { return len(r.StatusesOf("reboot-2")) == 3 })
	st := r.StatusesOf("reboot-2")
	if got := states(st); !slices.Equal(got, []string{protocol.CommandAccepted, protocol.CommandRebooting, protocol.CommandFailed}) ||
		!strings.Contains(st[2].Error, "Interactive authentication required") {
		t.Fatalf("statuses %+v", st)
	}
	waitFor(t, "ONLINE heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
}

// testUpdater stands in for agent/update's Updater (its own lane tests
// it): it reports downloading, then what the test sends.
type testUpdater struct {
	u    *Updates
	next chan protocol.CommandStatus
	cmds chan protocol.Command
}

func (f *testUpdater) Handle(_ context.Context, cmd protocol.Command) {
	f.cmds <- cmd
	f.u.report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandDownloading, Version: Version})
	go func() { f.u.report(<-f.next) }()
}

func (f *testUpdater) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func updateCommand(id string) protocol.Command {
	return protocol.Command{ID: id, Kind: protocol.CommandUpdate, Update: &protocol.UpdateOrder{RolloutID: "ro1", ReleaseID: "rel1", Version: "9.9.9",
		Path: protocol.ReleasePath("rel1"), Size: 1 << 20, SHA256: strings.Repeat("ab", 32), HealthFor: protocol.Duration{Duration: protocol.MinHealthFor}}}
}

// TestUpdateCommandsGoToTheUpdater: an update command goes to the updater
// once; its reports are journaled and sent, and the heartbeats say
// UPDATING from downloading until the update ends; an update order out of
// bounds is answered failed naming the field and never reaches the
// updater; statuses the updater gave before the agent ran (update.Boot)
// reach the journal.
func TestUpdateCommandsGoToTheUpdater(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	bad := updateCommand("upd-bad")
	bad.Update.Size = protocol.MaxUpdateSize + 1
	r.Commands = []protocol.Command{updateCommand("upd-1"), bad}
	state := t.TempDir()
	cfg := testConfig(t, r.URL, state)
	updates := NewUpdates(cfg)
	f := &testUpdater{u: updates, next: make(chan protocol.CommandStatus, 1), cmds: make(chan protocol.Command, 4)}
	updates.Updater = f
	updates.report(protocol.CommandStatus{ID: "upd-0", State: protocol.CommandRolledBack, Error: "the new binary exited at once", Version: Version})
	startAgentWith(t, cfg, Options{Updates: updates})

	waitFor(t, "downloading reported", func() bool { return len(r.StatusesOf("upd-1")) == 2 })
	if got := states(r.StatusesOf("upd-1")); !slices.Equal(got, []string{protocol.CommandAccepted, protocol.CommandDownloading}) {
		t.Fatalf("statuses %v", got)
	}
	waitFor(t, "UPDATING heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusUpdating })
	waitFor(t, "bad order failed", func() bool { return len(r.StatusesOf("upd-bad")) == 1 })
	if st := r.StatusesOf("upd-bad")[0]; st.State != protocol.CommandFailed || !strings.Contains(st.Error, "command.update.size") {
		t.Fatalf("bad order answered %+v", st)
	}
	f.next <- protocol.CommandStatus{ID: "upd-1", State: protocol.CommandHealthy, Version: "9.9.9"}
	waitFor(t, "healthy reported", func() bool { return len(r.StatusesOf("upd-1")) == 3 })
	waitFor(t, "ONLINE heartbeat after the update", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
	if n := len(f.cmds); n != 1 {
		t.Fatalf("the updater got %d commands", n)
	}
	// The relay resends after a reconnect: answered from the journal.
	r.Drop()
	waitFor(t, "resend answered", func() bool { return len(r.StatusesOf("upd-1")) == 4 })
	if st := r.StatusesOf("upd-1")[3]; st.State != protocol.CommandHealthy {
		t.Fatalf("resend answered %+v", st)
	}
	if len(f.cmds) != 1 {
		t.Fatal("a resent update reached the updater again")
	}
	j, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := j.lookup("upd-0"); !ok || e.Status.State != protocol.CommandRolledBack {
		t.Fatalf("the updater's boot report is not journaled: %+v", e)
	}
}

// TestUnfinishedCommandsSettledAtStart: a command journaled unfinished
// that nothing carries on after a restart (an update the updater does not
// hold, a reboot never asked for) is reported failed rather than left
// UPDATING forever.
func TestUnfinishedCommandsSettledAtStart(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	state := t.TempDir()
	j, _ := openJournal(state)
	j.take(updateCommand("upd-7"), protocol.CommandStatus{ID: "upd-7", State: protocol.CommandInstalling}, testNow)
	j.take(protocol.Command{ID: "rb-7", Kind: protocol.CommandReboot}, protocol.CommandStatus{ID: "rb-7", State: protocol.CommandAccepted}, testNow)
	r.Commands = []protocol.Command{updateCommand("upd-7"), {ID: "rb-7", Kind: protocol.CommandReboot}}
	startAgentWith(t, testConfig(t, r.URL, state), Options{})
	waitFor(t, "both answered", func() bool { return len(r.StatusesOf("upd-7")) >= 1 && len(r.StatusesOf("rb-7")) >= 1 })
	for _, id := range []string{"upd-7", "rb-7"} {
		if st := r.StatusesOf(id)[0]; st.State != protocol.CommandFailed || !strings.Contains(st.Error, "stopped") {
			t.Errorf("%s answered %+v", id, st)
		}
	}
	waitFor(t, "ONLINE heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
}

// TestCommandJournalBoundedAndAtomic: the journal keeps the newest 256
// commands across a reopen, and an unreadable one is set aside.
func TestCommandJournalBoundedAndAtomic(t *testing.T) {
	state := t.TempDir()
	j, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxJournal + 44 {
		id := fmt.Sprintf("c%d", i)
		if _, fresh, err := j.take(protocol.Command{ID: id, Kind: protocol.CommandReboot}, protocol.CommandStatus{ID: id, State: protocol.CommandAccepted}, testNow); err != nil || !fresh {
			t.Fatal(fresh, err)
		}
	}
	if _, fresh, _ := j.take(protocol.Command{ID: "c299", Kind: protocol.CommandReboot}, protocol.CommandStatus{}, testNow); fresh {
		t.Fatal("a command taken twice")
	}
	j2, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(j2.list) != maxJournal || j2.list[0].ID != "c44" {
		t.Fatalf("%d kept, first %s", len(j2.list), j2.list[0].ID)
	}
	if _, err := os.Stat(filepath.Join(state, commandsFile+".tmp")); !os.IsNotExist(err) {
		t.Fatal("temporary file left")
	}
	os.WriteFile(filepath.Join(state, commandsFile), []byte(`[{"id":`), 0o600)
	j3, err := openJournal(state)
	if err == nil || len(j3.list) != 0 {
		t.Fatalf("corrupt journal: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(state, commandsFile+".bad")); string(b) != `[{"id":` {
		t.Fatal("corrupt journal not set aside")
	}
	var raw []json.RawMessage
	if b, _ := os.ReadFile(filepath.Join(state, commandsFile)); len(b) > 0 && json.Unmarshal(b, &raw) != nil {
		t.Fatal("journal unreadable")
	}
}

var testNow = time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
