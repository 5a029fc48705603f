// Package update updates the agent in place (issue 28, DESIGN.md "Agent
// updates with staged rollout and automatic rollback", docs/updates.md):
// it downloads a release from the relay (resumable, bounded, checksummed),
// verifies its minisign signature against the key given at install
// (github.com/jedisct1/go-minisign), writes it beside the running binary
// as <binary>.new and executes it in place of the running process. The new
// binary is on trial: it must connect and stay healthy (Health) for the
// order's healthFor, and only then is it renamed over the binary path
// (the commit); until then the binary path holds the old binary, so a
// crash, a kill or a power cut during the trial brings the old binary
// back (under systemd by the unit's restart, without a supervisor by the
// guard process, guard.go), and its Boot retries the trial or rolls back.
// Every step is journaled in StateDir/update with fsync, and Boot
// finishes or undoes an interrupted one.
package update

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

// Health is the agent's health as the trial judges it.
type Health struct {
	// LinkUp: the agent is connected to a relay and welcomed.
	LinkUp bool
	// ConfigApplied: the desired configuration the agent holds is applied
	// (the relay sent it on this run, or it had none).
	ConfigApplied bool
	// Failing names each channel and point reading with an error now
	// ("rs485-1", "rs485-1.boiler_temp"); the trial fails when one that
	// read without error before the update is in it.
	Failing []string
}

// Options configure the updater.
type Options struct {
	// StateDir is the agent's state directory (the journal, downloads and
	// the previous binary live in StateDir/update).
	StateDir string
	// Binary is the running agent's binary path (os.Executable, symlinks
	// resolved); it must be writable by the agent.
	Binary string
	// KeyFile is the minisign public key file (--update-key); "" refuses
	// every update.
	KeyFile string
	// Relay returns the base URL of the relay in use (downloads go
	// there), Token the device token (bearer), Client the HTTP client.
	Relay  func() string
	Token  func() string
	Client *http.Client
	// Health returns the agent's health now.
	Health func() Health
	// Report sends a command's status to the relay (the agent journals
	// it and sends it now or after the next welcome).
	Report func(protocol.CommandStatus)
	// Version is the running agent's version.
	Version string
	Log     *slog.Logger
}

// DefaultHealthFor is the trial's length when an order gives none.
const DefaultHealthFor = time.Minute

// maxTrials is how many times the new binary may start before the
// update is rolled back (it crashes, or the gateway loses power, during
// its trial).
const maxTrials = 3

// maxAttempts is how many times a download and install may start
// (the agent restarted while downloading or installing) before the
// command fails.
const maxAttempts = 3

// checkEvery is how often Run looks at the agent's health in a trial.
const checkEvery = time.Second

// Updater runs update commands and the trial of a freshly started binary.
type Updater struct {
	o Options
	f files

	mu      sync.Mutex
	busy    bool          // a command is downloading or installing
	current string        // its id
	trial   *journal      // this process is the new binary on trial
	resume  *journal      // a download or install to start again (Run)
	start   time.Time     // of the trial
	done    chan struct{} // closed when the trial is decided
}

// Boot runs first at the agent's start, before the link: it finishes or
// undoes an update that was interrupted, and, when this process is a new
// binary on trial, returns an Updater whose Run judges the trial. It may
// not return (it executes the old or the new binary).
func Boot(o Options) (*Updater, error) {
	RunGuardIfAsked()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Binary != "" {
		o.Binary = resolve(o.Binary)
	}
	u := &Updater{o: o, f: files{dir: filepath.Join(o.StateDir, "update")}, done: make(chan struct{})}
	j, err := u.f.readJournal()
	if err != nil || j == nil {
		if err != nil {
			// An unreadable journal: the binary path holds a whole binary
			// (the old or a committed new one) either way; start afresh.
			u.o.Log.Error("update journal unreadable; discarded", "err", err)
			u.f.clearJournal()
		}
		return u, nil
	}
	reap(j.GuardPID)
	u.o.Binary = j.Binary
	ord := j.order()
	switch {
	case j.Step == stepDownloading || j.Step == stepInstalling:
		os.Remove(newPath(j.Binary))
		switch {
		case o.Version != j.FromVersion:
			u.finish(j, protocol.CommandFailed, fmt.Sprintf("version %s runs instead of %s: the update was abandoned", o.Version, j.FromVersion))
		case j.Attempts >= maxAttempts:
			u.finish(j, protocol.CommandFailed, fmt.Sprintf("the agent stopped %d times while %s version %s", j.Attempts, j.Step, ord.Version))
		default:
			u.o.Log.Info("update interrupted; it starts again once connected", "step", j.Step, "version", ord.Version)
			u.resume = j
		}
	case j.Step == stepTrial && o.Version == ord.Version:
		u.o.Log.Info("new version on trial", "version", ord.Version, "from", j.FromVersion, "healthFor", healthFor(ord), "start", j.Trials)
		u.trial, u.start = j, time.Now()
		fault("trial-started")
	case j.Step == stepTrial && o.Version == j.FromVersion:
		// The old binary runs again: the new one stopped (a crash, a
		// kill, a power cut) during its trial.
		if j.Trials >= maxTrials {
			u.finish(j, protocol.CommandRolledBack, fmt.Sprintf("version %s stopped %d times during its trial", ord.Version, j.Trials))
			break
		}
		if !sameSHA256(newPath(j.Binary), ord.SHA256) {
			u.finish(j, protocol.CommandRolledBack, fmt.Sprintf("version %s stopped during its trial and its binary is gone", ord.Version))
			break
		}
		u.o.Log.Warn("the new version stopped during its trial; starting it again", "version", ord.Version, "starts", j.Trials)
		err := u.startTrial(j)
		u.finish(j, protocol.CommandRolledBack, fmt.Sprintf("version %s stopped during its trial and cannot start again: %v", ord.Version, err))
	case j.Step == stepCommitting && o.Version == ord.Version:
		u.finish(j, protocol.CommandHealthy, "")
	case j.Step == stepCommitting && o.Version == j.FromVersion:
		if !sameSHA256(newPath(j.Binary), ord.SHA256) {
			u.finish(j, protocol.CommandRolledBack, fmt.Sprintf("version %s passed its trial but its binary was lost before the commit", ord.Version))
			break
		}
		if err := renameSync(newPath(j.Binary), j.Binary); err != nil {
			u.finish(j, protocol.CommandRolledBack, fmt.Sprintf("commit of version %s: %v", ord.Version, err))
			break
		}
		err := u.exec(j.Binary)
		u.finish(j, protocol.CommandHealthy, fmt.Sprintf("version %s is kept but does not run yet: %v", ord.Version, err))
	case j.Step == stepRolledBack && o.Version == j.FromVersion:
		u.finish(j, protocol.CommandRolledBack, j.Reason)
	case j.Step == stepRolledBack:
		// The new binary journaled its rollback but its exec of the old one
		// failed, and it was started again from <binary>.new.
		err := u.exec(j.Binary)
		return u, fmt.Errorf("roll back to %s: %w", j.FromVersion, err)
	default:
		os.Remove(newPath(j.Binary))
		u.finish(j, protocol.CommandFailed, fmt.Sprintf("version %s runs, neither %s nor %s: the update was abandoned", o.Version, j.FromVersion, ord.Version))
	}
	return u, nil
}

// finish ends an update: it reports its last state, clears the journal,
// and removes what the update left.
func (u *Updater) finish(j *journal, state, reason string) {
	switch state {
	case protocol.CommandHealthy:
		u.o.Log.Info("update kept", "version", j.order().Version)
	default:
		u.o.Log.Warn("update ended", "state", state, "version", j.order().Version, "reason", reason)
	}
	u.o.Report(protocol.CommandStatus{ID: j.Command.ID, State: state, Error: reason, Version: u.o.Version})
	if err := u.f.clearJournal(); err != nil {
		u.o.Log.Error("update journal", "err", err)
	}
	os.Remove(newPath(j.Binary))
	if state != protocol.CommandFailed {
		u.f.removeParts()
	}
}

// Trial reports whether this process is a new binary on trial (the agent
// reports UPDATING meanwhile).
func (u *Updater) Trial() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.trial != nil
}

// Active reports whether an update is under way: downloading, installing,
// about to start again, or on trial.
func (u *Updater) Active() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.busy || u.trial != nil || u.resume != nil
}

// Handle starts an update command (asynchronously; progress through
// Options.Report).
func (u *Updater) Handle(ctx context.Context, cmd protocol.Command) {
	u.mu.Lock()
	if u.current == cmd.ID || (u.trial != nil && u.trial.Command.ID == cmd.ID) || (u.resume != nil && u.resume.Command.ID == cmd.ID) {
		u.mu.Unlock()
		return // under way: its statuses follow
	}
	if u.busy || u.trial != nil {
		u.mu.Unlock()
		u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: "another update is under way", Version: u.o.Version})
		return
	}
	u.busy, u.current = true, cmd.ID
	u.mu.Unlock()
	go func() {
		err := u.install(ctx, cmd)
		u.mu.Lock()
		u.busy, u.current = false, ""
		u.mu.Unlock()
		if err != nil && ctx.Err() != nil {
			u.o.Log.Info("update interrupted by the agent's stop; it starts again at the next start", "command", cmd.ID, "err", err)
		} else if err != nil {
			u.o.Log.Warn("update failed", "command", cmd.ID, "err", err)
			u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: err.Error(), Version: u.o.Version})
		}
	}()
}

// install runs an update up to the exec of the new binary; an error means
// nothing was swapped and the command failed.
func (u *Updater) install(ctx context.Context, cmd protocol.Command) (err error) {
	if cmd.Kind != protocol.CommandUpdate {
		return fmt.Errorf("command kind %q is not an update", cmd.Kind)
	}
	ord := cmd.Update
	if err := checkOrder(ord); err != nil {
		return err
	}
	if ord.Version == u.o.Version {
		u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandHealthy, Version: u.o.Version})
		return nil
	}
	if u.o.KeyFile == "" {
		return errors.New("this agent has no update key (--update-key): updates are refused")
	}
	if _, err := os.Stat(u.o.KeyFile); err != nil {
		return fmt.Errorf("update key: %w", err)
	}
	if u.o.Binary == "" {
		return errors.New("the agent's binary path is unknown")
	}
	if err := writable(filepath.Dir(u.o.Binary)); err != nil {
		return fmt.Errorf("the agent cannot replace its binary %s (docs/updates.md): %w", u.o.Binary, err)
	}
	j, err := u.f.readJournal()
	if err != nil {
		return err
	}
	switch {
	case j == nil:
		j = &journal{Command: cmd, Binary: u.o.Binary, FromVersion: u.o.Version}
	case j.Command.ID != cmd.ID:
		return fmt.Errorf("update %s is under way", j.Command.ID)
	}
	j.Step, j.Attempts = stepDownloading, j.Attempts+1
	if err := u.f.writeJournal(j); err != nil {
		return err
	}
	// From here on every failure clears the journal (nothing was swapped).
	defer func() {
		if err != nil && ctx.Err() == nil {
			if cerr := u.f.clearJournal(); cerr != nil {
				u.o.Log.Error("update journal", "err", cerr)
			}
			os.Remove(newPath(j.Binary))
		}
	}()
	u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandDownloading, Version: u.o.Version})
	part := u.f.part(ord.ReleaseID)
	if err := u.download(ctx, ord, part); err != nil {
		return err
	}
	fault("downloaded")
	if err := u.verify(ord, part); err != nil {
		os.Remove(part)
		return err
	}
	fault("verified")
	u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandInstalling, Version: u.o.Version})
	failing := slices.Clone(u.o.Health().Failing)
	slices.Sort(failing)
	j.Step, j.FailingBefore = stepInstalling, failing
	if err := u.f.writeJournal(j); err != nil {
		return err
	}
	fault("installing")
	if err := copyFileSync(j.Binary, u.f.previous(), 0o700); err != nil {
		return fmt.Errorf("keep the previous binary: %w", err)
	}
	fault("previous-saved")
	if err := copyFileSync(part, newPath(j.Binary), 0o755); err != nil {
		return fmt.Errorf("write the new binary: %w", err)
	}
	os.Remove(part)
	fault("new-written")
	u.o.Log.Info("starting the new version on trial", "version", ord.Version, "healthFor", healthFor(ord))
	return u.startTrial(j)
}

// startTrial starts the guard, journals the trial and executes
// <binary>.new in place of this process. It returns only on failure.
func (u *Updater) startTrial(j *journal) error {
	pid, err := startGuard(j.Binary, u.f)
	if err != nil {
		return err
	}
	fault("guard-started")
	j.Step, j.Trials, j.GuardPID = stepTrial, j.Trials+1, pid
	if err := u.f.writeJournal(j); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	fault("trial-journaled")
	err = u.exec(newPath(j.Binary))
	syscall.Kill(pid, syscall.SIGKILL)
	return err
}

// exec replaces this process with binary, same arguments and environment.
func (u *Updater) exec(binary string) error {
	err := syscall.Exec(binary, os.Args, withoutEnv(withoutEnv(os.Environ(), GuardEnv), guardPIDEnv))
	return fmt.Errorf("exec %s: %w", binary, err)
}

// writable checks that the agent can create files in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".fleet-agent-update-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// healthFor is an order's trial length.
func healthFor(o *protocol.UpdateOrder) time.Duration {
	if o == nil || o.HealthFor.Duration <= 0 {
		return DefaultHealthFor
	}
	return o.HealthFor.Duration
}

// Run judges a trial (when Boot found one) until it is kept or rolled
// back, starts again an update interrupted by a restart once the link is
// up, and returns when ctx ends.
func (u *Updater) Run(ctx context.Context) error {
	u.mu.Lock()
	trial, resume := u.trial, u.resume
	u.mu.Unlock()
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	linked := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		h := u.o.Health()
		linked = linked || h.LinkUp
		if resume != nil && h.LinkUp {
			u.mu.Lock()
			u.resume = nil
			u.mu.Unlock()
			u.Handle(ctx, resume.Command)
			resume = nil
		}
		if trial == nil {
			if resume == nil {
				<-ctx.Done()
				return nil
			}
			continue
		}
		if time.Since(u.start) < healthFor(trial.order()) {
			continue
		}
		if reason := verdict(trial, h, linked); reason != "" {
			return u.rollback(trial, reason)
		}
		if err := u.commit(trial); err != nil {
			return u.rollback(trial, err.Error())
		}
		u.mu.Lock()
		u.trial = nil
		u.mu.Unlock()
		trial = nil
	}
}

// verdict judges the health at the end of a trial: "" when healthy, else
// why not.
func verdict(j *journal, h Health, linked bool) string {
	ord := j.order()
	if !linked {
		return fmt.Sprintf("version %s never connected to a relay within healthFor %s", ord.Version, healthFor(ord))
	}
	if !h.ConfigApplied {
		return fmt.Sprintf("version %s did not apply the configuration within healthFor %s", ord.Version, healthFor(ord))
	}
	var newly []string
	for _, n := range h.Failing {
		if !slices.Contains(j.FailingBefore, n) {
			newly = append(newly, n)
		}
	}
	if len(newly) > 0 {
		slices.Sort(newly)
		return fmt.Sprintf("version %s reads with errors what read before the update: %s", ord.Version, strings.Join(newly, ", "))
	}
	return ""
}

// commit keeps the new binary: journaled, renamed over the binary path,
// reported healthy, the journal cleared.
func (u *Updater) commit(j *journal) error {
	j.Step = stepCommitting
	if err := u.f.writeJournal(j); err != nil {
		return err
	}
	fault("committing")
	if err := renameSync(newPath(j.Binary), j.Binary); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	fault("committed")
	u.finish(j, protocol.CommandHealthy, "")
	return nil
}

// rollback journals why the trial failed and executes the old binary,
// which reports it (Boot). It returns only when the exec fails.
func (u *Updater) rollback(j *journal, reason string) error {
	u.o.Log.Warn("update rolled back", "version", j.order().Version, "reason", reason)
	j.Step, j.Reason = stepRolledBack, reason
	if err := u.f.writeJournal(j); err != nil {
		return err
	}
	fault("rolled-back")
	return u.exec(j.Binary)
}
