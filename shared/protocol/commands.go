package protocol

import (
	"fmt"
	"strings"
	"time"
)

// Bounds of the command messages (issue 28). A command comes from the
// relay: the agent checks it (CheckCommand) and answers one it cannot take
// failed, naming the field (or drops one whose id it cannot answer); a
// command status comes from the agent: the relay checks it
// (CheckCommandStatus) and closes the connection on one out of bounds, as
// for every other message, and the agent clamps it first
// (ClampCommandStatus).
const (
	// MaxCommandID bounds a command's id, and an update order's rollout
	// and release ids.
	MaxCommandID = 64
	// MaxCommandError bounds a command status's error.
	MaxCommandError = 1024
	// MaxUpdateSize bounds an update order's size (cloud.MaxReleaseBytes).
	MaxUpdateSize = 64 << 20
	// MinHealthFor and MaxHealthFor bound an update order's healthFor.
	MinHealthFor = 10 * time.Second
	MaxHealthFor = time.Hour
)

// ValidCommandID reports whether id is a command id (or an update order's
// rollout or release id): 1 to MaxCommandID letters, digits, '-' and '_'.
func ValidCommandID(id string) bool {
	if id == "" || len(id) > MaxCommandID {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// ValidCommandState reports whether s is a state an agent reports.
func ValidCommandState(s string) bool {
	switch s {
	case CommandAccepted, CommandDownloading, CommandInstalling, CommandHealthy, CommandFailed, CommandRolledBack, CommandRebooting:
		return true
	}
	return false
}

// CommandFinished reports whether s ends a command: healthy, failed,
// rolled_back, or rebooting (a reboot ends with the agent's process).
func CommandFinished(s string) bool {
	switch s {
	case CommandHealthy, CommandFailed, CommandRolledBack, CommandRebooting:
		return true
	}
	return false
}

// SentByAgent reports whether typ is a message type an agent sends.
func SentByAgent(typ string) bool {
	switch typ {
	case TypeHello, TypeHeartbeat, TypeRecords, TypeConfigApplied, TypeCommandStatus:
		return true
	}
	return false
}

// SentByRelay reports whether typ is a message type a relay sends.
func SentByRelay(typ string) bool {
	switch typ {
	case TypeWelcome, TypeAck, TypeConfig, TypeCommand:
		return true
	}
	return false
}

// CheckCommandStatus checks an agent's command status against Table.
func CheckCommandStatus(s *CommandStatus) error {
	switch {
	case !ValidCommandID(s.ID):
		return outOfBound("commandStatus.id", "%q is not 1 to %d letters, digits, '-' and '_'", clip(s.ID, MaxCommandID+1), MaxCommandID)
	case !ValidCommandState(s.State):
		return outOfBound("commandStatus.state", "%q is not a command state", clip(s.State, 20))
	}
	return checkTexts("commandStatus.", s, commandStatusTexts[:])
}

// ClampCommandStatus brings a command status within Table: text shortened,
// an unknown state sent as failed. An id out of bounds cannot be mended: it
// returns a *BoundError and the status must not be sent (CheckCommand
// refuses such a command, so no status answers one).
func ClampCommandStatus(s *CommandStatus) error {
	if !ValidCommandID(s.ID) {
		return outOfBound("commandStatus.id", "%q is not 1 to %d letters, digits, '-' and '_'", text(s.ID, MaxCommandID+1), MaxCommandID)
	}
	if !ValidCommandState(s.State) {
		s.Error = strings.TrimPrefix(fmt.Sprintf("%s; state %q is not a command state", s.Error, text(s.State, 20)), "; ")
		s.State = CommandFailed
	}
	clampTexts(s, commandStatusTexts[:])
	return nil
}

// CheckCommand checks a command from the relay: its id, kind and, for an
// update, its order. A command whose id is valid but that fails another
// check is answered failed with the error; unknown kinds too (a newer
// relay's).
func CheckCommand(c *Command) error {
	if !ValidCommandID(c.ID) {
		return outOfBound("command.id", "%q is not 1 to %d letters, digits, '-' and '_'", text(c.ID, MaxCommandID+1), MaxCommandID)
	}
	switch c.Kind {
	case CommandReboot:
		if c.Update != nil {
			return outOfBound("command.update", "is set for a reboot")
		}
	case CommandUpdate:
		if c.Update == nil {
			return outOfBound("command.update", "is missing")
		}
		return CheckUpdateOrder(c.Update)
	default:
		return outOfBound("command.kind", "%q is not reboot or update", text(c.Kind, 20))
	}
	return nil
}

// CheckUpdateOrder checks an update order's fields.
func CheckUpdateOrder(u *UpdateOrder) error {
	const releases = "/agent/v1/releases/"
	switch {
	case !ValidCommandID(u.RolloutID):
		return outOfBound("command.update.rolloutId", "is not 1 to %d letters, digits, '-' and '_'", MaxCommandID)
	case !ValidCommandID(u.ReleaseID):
		return outOfBound("command.update.releaseId", "is not 1 to %d letters, digits, '-' and '_'", MaxCommandID)
	case u.Version == "" || len(u.Version) > MaxTextField:
		return outOfBound("command.update.version", "missing or longer than %d bytes", MaxTextField)
	case !strings.HasPrefix(u.Path, releases) || !ValidCommandID(u.Path[len(releases):]):
		return outOfBound("command.update.path", "%q is not %s{id}", text(u.Path, 100), releases)
	case u.Size < 1 || u.Size > MaxUpdateSize:
		return outOfBound("command.update.size", "%d is not 1 to %d bytes", u.Size, MaxUpdateSize)
	case !hex64(u.SHA256):
		return outOfBound("command.update.sha256", "is not 64 hexadecimal digits")
	case len(u.Signature) > MaxCommandSignature:
		return outOfBound("command.update.signature", "longer than %d bytes", MaxCommandSignature)
	case u.HealthFor.Duration < MinHealthFor || u.HealthFor.Duration > MaxHealthFor:
		return outOfBound("command.update.healthFor", "%s is not %s to %s", u.HealthFor.Duration, MinHealthFor, MaxHealthFor)
	}
	return nil
}

// hex64 reports whether s is 64 hexadecimal digits (a SHA-256).
func hex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// commandStatusTexts are a command status's free-text fields.
var commandStatusTexts = [...]textField[CommandStatus]{
	{"error", MaxCommandError, func(s *CommandStatus) *string { return &s.Error }},
	{"version", MaxTextField, func(s *CommandStatus) *string { return &s.Version }},
}
