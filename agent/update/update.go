// Package update updates the agent in place (issue 28, DESIGN.md "Agent
// updates with staged rollout and automatic rollback"): it downloads a
// release from the relay (resumable, bounded, checksummed), verifies its
// minisign signature against the key given at install
// (github.com/jedisct1/go-minisign), installs it beside the running binary
// and executes it in place of the running process. The new binary is on
// trial: it must connect and stay healthy (Health) for the order's
// healthFor, else the previous binary is restored and executed again, by
// itself, also after a crash or a power cut at any moment of the swap (the
// steps are journaled in StateDir/update with fsync, and Boot finishes or
// undoes an interrupted one).
//
// CONTRACT SKELETON: the updater lane implements it.
package update

import (
	"context"
	"log/slog"
	"net/http"

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

// Updater runs update commands and the trial of a freshly swapped binary.
type Updater struct{ o Options }

// Boot runs first at the agent's start, before the link: it finishes or
// undoes a swap that was interrupted, and, when this process is a new
// binary on trial, returns an Updater whose Run judges the trial. It may
// not return (it executes the restored binary).
func Boot(o Options) (*Updater, error) { return &Updater{o: o}, nil }

// Handle starts an update command (asynchronously; progress through
// Options.Report).
func (u *Updater) Handle(ctx context.Context, cmd protocol.Command) {
	u.o.Report(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: "updates are not implemented yet", Version: u.o.Version})
}

// Run judges a trial (when Boot found one) until it is kept or rolled
// back, and returns when ctx ends.
func (u *Updater) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
