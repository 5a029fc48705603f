package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet/fleet/agent/update"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Commands (issue 28): the relay sends reboot and update commands over the
// link; the agent takes each command id at most once (commandJournal),
// runs it on its own goroutine (one command at a time) and reports its
// progress with CommandStatus, journaled first. A command sent again is
// answered with its journaled status.

// Updater is what the agent needs of agent/update's Updater.
type Updater interface {
	// Handle starts an update command; progress comes back through
	// update.Options.Report.
	Handle(ctx context.Context, cmd protocol.Command)
	// Run judges the trial of a freshly swapped binary until ctx ends.
	Run(ctx context.Context) error
}

// Updates joins agent/update's Updater, which starts before the agent
// (update.Boot may execute another binary), to the agent. The main makes
// it with NewUpdates, gives update.Boot its Options, sets Updater to what
// Boot returned and passes it to New in Options.Updates. Statuses the
// updater reports before the agent runs are kept and journaled when New
// attaches the agent.
type Updates struct {
	Updater Updater

	cfg     Config
	mu      sync.Mutex
	a       *Agent
	pending []protocol.CommandStatus
}

// NewUpdates returns the Updates of an agent of cfg.
func NewUpdates(cfg Config) *Updates { return &Updates{cfg: cfg} }

// Options returns the updater's options: binary is the running agent's
// binary (os.Executable, symlinks resolved).
func (u *Updates) Options(binary string, log *slog.Logger) update.Options {
	return update.Options{
		StateDir: u.cfg.StateDir,
		Binary:   binary,
		KeyFile:  u.cfg.UpdateKey,
		Relay:    u.relay,
		Token:    u.token,
		Health:   u.health,
		Report:   u.report,
		Version:  Version,
		Log:      log,
	}
}

func (u *Updates) agent() *Agent {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.a
}

// relay is the base URL of the relay the link uses now.
func (u *Updates) relay() string {
	if a := u.agent(); a != nil {
		return a.link.Relay()
	}
	return u.cfg.Relays[0]
}

func (u *Updates) token() string {
	if a := u.agent(); a != nil {
		return a.cfg.Token
	}
	return u.cfg.Token
}

// health is the agent's health; nothing is healthy before it runs.
func (u *Updates) health() update.Health {
	if a := u.agent(); a != nil {
		return a.Health()
	}
	return update.Health{}
}

func (u *Updates) report(st protocol.CommandStatus) {
	u.mu.Lock()
	a := u.a
	if a == nil {
		u.pending = append(u.pending, st)
	}
	u.mu.Unlock()
	if a != nil {
		a.reportCommand(protocol.CommandUpdate, st)
	}
}

// attach hands the updater's reports to a, those made before first.
func (u *Updates) attach(a *Agent) {
	u.mu.Lock()
	u.a = a
	pending := u.pending
	u.pending = nil
	u.mu.Unlock()
	for _, st := range pending {
		a.reportCommand(protocol.CommandUpdate, st)
	}
}

// commandQueue bounds the commands waiting for the command goroutine; one
// beyond is dropped (the relay sends it again after the next welcome).
const commandQueue = 32

// onCommand takes a command from the link without blocking it.
func (a *Agent) onCommand(_ context.Context, cmd protocol.Command) {
	select {
	case a.cmds <- cmd:
	default:
		a.log.Warn("too many commands waiting; this one comes again after the next welcome", "command", cmd.ID)
	}
}

// commandLoop runs the commands one at a time until ctx ends.
func (a *Agent) commandLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case cmd := <-a.cmds:
			a.runCommand(ctx, cmd)
		}
	}
}

// runCommand runs a command the agent has not taken before, or answers
// one it has with its journaled status.
func (a *Agent) runCommand(ctx context.Context, cmd protocol.Command) {
	if e, ok := a.journal.lookup(cmd.ID); ok {
		a.log.Info("command taken before; answering its status", "command", cmd.ID, "state", e.Status.State)
		a.link.SendCommandStatus(e.Status)
		return
	}
	first := protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandAccepted, Version: Version}
	checkErr := protocol.CheckCommand(&cmd)
	if checkErr != nil {
		first.State, first.Error = protocol.CommandFailed, checkErr.Error()
	}
	e, fresh, err := a.journal.take(cmd, first, a.now())
	if err != nil {
		// Without the journal on disk the command could run twice: it
		// does not run (the relay sends it again).
		a.log.Error("command not run: its journal cannot be written", "command", cmd.ID, "err", err)
		a.link.SendCommandStatus(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: err.Error(), Version: Version})
		return
	}
	if !fresh {
		a.link.SendCommandStatus(e.Status)
		return
	}
	a.log.Info("command taken", "command", cmd.ID, "kind", cmd.Kind, "error", first.Error)
	a.link.SendCommandStatus(first)
	if checkErr != nil {
		return
	}
	switch cmd.Kind {
	case protocol.CommandReboot:
		a.reboot(ctx, cmd)
	case protocol.CommandUpdate:
		if a.updater == nil {
			a.reportCommand(cmd.Kind, protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: "this agent runs without its updater", Version: Version})
			return
		}
		a.updater.Handle(ctx, cmd)
	}
}

// reportCommand journals a command's status and sends it (now when
// connected; else the relay's resend of the command is answered from the
// journal).
func (a *Agent) reportCommand(kind string, st protocol.CommandStatus) {
	if err := a.journal.set(kind, st, a.now()); err != nil {
		a.log.Error("command status not journaled", "command", st.ID, "state", st.State, "err", err)
	}
	a.link.SendCommandStatus(st)
	a.link.Kick() // the heartbeat's status follows
}

// rebootFlush bounds the wait for the REBOOTING heartbeat to go out before
// the reboot is asked for.
const rebootFlush = 3 * time.Second

// reboot reports rebooting (the heartbeats say REBOOTING from then on),
// flushes what it can, and asks logind to reboot. A refused reboot is
// reported failed and the status goes back.
func (a *Agent) reboot(ctx context.Context, cmd protocol.Command) {
	a.rebooting.Store(true)
	beats := a.link.Stats().HeartbeatsSent
	a.reportCommand(cmd.Kind, protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandRebooting, Version: Version})
	if err := a.spool.Sync(); err != nil {
		a.log.Warn("spool sync before reboot", "err", err)
	}
	if a.link.Connected() {
		deadline := time.Now().Add(rebootFlush)
		for a.link.Stats().HeartbeatsSent == beats && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	a.log.Warn("rebooting the gateway (reboot command)", "command", cmd.ID)
	if err := a.rebooter.Reboot(ctx); err != nil {
		a.rebooting.Store(false)
		a.log.Error("reboot refused", "command", cmd.ID, "err", err)
		a.reportCommand(cmd.Kind, protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: err.Error(), Version: Version})
	}
}

// settleCommands ends, at start, the commands journaled unfinished that
// nothing carries on: a reboot never asked for, an update the updater
// does not hold (neither running again nor on trial).
func (a *Agent) settleCommands() {
	for _, e := range a.journal.unfinished(protocol.CommandReboot) {
		a.reportCommand(e.Kind, protocol.CommandStatus{ID: e.ID, State: protocol.CommandFailed, Error: "the agent stopped before it could reboot", Version: Version})
	}
	if a.updateActive() {
		return
	}
	for _, e := range a.journal.unfinished(protocol.CommandUpdate) {
		a.reportCommand(e.Kind, protocol.CommandStatus{ID: e.ID, State: protocol.CommandFailed,
			Error: fmt.Sprintf("the agent (version %s) stopped during the update and nothing carries it on", Version), Version: Version})
	}
}

// updateActive reports whether the updater holds an update (downloading,
// installing, to start again, on trial), when it says so.
func (a *Agent) updateActive() bool {
	s, ok := a.updater.(interface{ Active() bool })
	return ok && s.Active()
}

// updating reports whether the heartbeat says UPDATING: from a
// downloading or installing report until the update ends, which covers
// the new binary's trial (its journaled status is installing until it
// reports healthy or rolled_back), or while the updater holds one.
func (a *Agent) updating() bool {
	for _, e := range a.journal.unfinished(protocol.CommandUpdate) {
		if e.Status.State == protocol.CommandDownloading || e.Status.State == protocol.CommandInstalling {
			return true
		}
	}
	return a.updateActive()
}

// commandStatus returns the status the heartbeat reports: REBOOTING once
// a reboot is asked for, UPDATING while an update runs, else the status
// file's.
func (a *Agent) commandStatus(fromFile resource.DeviceStatus) resource.DeviceStatus {
	switch {
	case a.rebooting.Load():
		return resource.StatusRebooting
	case a.updating():
		return resource.StatusUpdating
	}
	return fromFile
}

// Health is the agent's health as an update's trial judges it: the link
// welcomed, the configuration held applied on this run, and the channels
// (a telemetry error) and points (quality bad) reading with an error now.
func (a *Agent) Health() update.Health {
	h := update.Health{LinkUp: a.link.Connected(), ConfigApplied: a.configApplied.Load()}
	now := a.now()
	for _, c := range a.io.States() {
		if c.Error != "" {
			h.Failing = append(h.Failing, c.ID)
		}
		for _, p := range a.points.States(c.ID, now) {
			if p.Quality == serialcfg.QualityBad {
				h.Failing = append(h.Failing, c.ID+"."+p.Name)
			}
		}
	}
	return h
}
