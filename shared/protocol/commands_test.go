package protocol

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func validUpdate() *Command {
	return &Command{ID: "cmd-1", Kind: CommandUpdate, Update: &UpdateOrder{RolloutID: "ro1", ReleaseID: "rel1", Version: "1.4.2",
		Path: ReleasePath("rel1"), Size: 12 << 20, SHA256: strings.Repeat("0f", 32), Signature: "untrusted comment: x\nRWQ\n", HealthFor: Duration{time.Minute}}}
}

// TestCheckCommand: the agent refuses a command out of bounds, naming the
// field, and takes one within.
func TestCheckCommand(t *testing.T) {
	if err := CheckCommand(validUpdate()); err != nil {
		t.Fatal(err)
	}
	if err := CheckCommand(&Command{ID: strings.Repeat("a", MaxCommandID), Kind: CommandReboot}); err != nil {
		t.Fatal(err)
	}
	for field, mod := range map[string]func(c *Command){
		"command.id":                func(c *Command) { c.ID = strings.Repeat("a", MaxCommandID+1) },
		"command.id ":               func(c *Command) { c.ID = "../x" },
		"command.kind":              func(c *Command) { c.Kind = "format_disk" },
		"command.update":            func(c *Command) { c.Update = nil },
		"command.update ":           func(c *Command) { c.Kind = CommandReboot },
		"command.update.rolloutId":  func(c *Command) { c.Update.RolloutID = "" },
		"command.update.releaseId":  func(c *Command) { c.Update.ReleaseID = "a b" },
		"command.update.version":    func(c *Command) { c.Update.Version = "" },
		"command.update.version ":   func(c *Command) { c.Update.Version = strings.Repeat("1", MaxTextField+1) },
		"command.update.path":       func(c *Command) { c.Update.Path = "/agent/v1/releases/../../etc/passwd" },
		"command.update.path ":      func(c *Command) { c.Update.Path = "https://elsewhere.example/agent/v1/releases/rel1" },
		"command.update.path  ":     func(c *Command) { c.Update.Path = "/agent/v1/releases/" },
		"command.update.size":       func(c *Command) { c.Update.Size = 0 },
		"command.update.size ":      func(c *Command) { c.Update.Size = MaxUpdateSize + 1 },
		"command.update.sha256":     func(c *Command) { c.Update.SHA256 = strings.Repeat("g", 64) },
		"command.update.sha256 ":    func(c *Command) { c.Update.SHA256 = strings.Repeat("a", 63) },
		"command.update.signature":  func(c *Command) { c.Update.Signature = strings.Repeat("s", MaxCommandSignature+1) },
		"command.update.healthFor":  func(c *Command) { c.Update.HealthFor.Duration = MinHealthFor - time.Millisecond },
		"command.update.healthFor ": func(c *Command) { c.Update.HealthFor.Duration = MaxHealthFor + time.Second },
	} {
		c := validUpdate()
		mod(c)
		err := CheckCommand(c)
		var be *BoundError
		if !errors.As(err, &be) || be.Field != strings.TrimSpace(field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestCheckCommandStatus: the relay refuses a status out of bounds, naming
// the field.
func TestCheckCommandStatus(t *testing.T) {
	ok := CommandStatus{ID: "cmd-1", State: CommandHealthy, Error: strings.Repeat("e", MaxCommandError), Version: "1.4.2"}
	if err := CheckCommandStatus(&ok); err != nil {
		t.Fatal(err)
	}
	for field, st := range map[string]CommandStatus{
		"commandStatus.id":      {State: CommandFailed},
		"commandStatus.state":   {ID: "c", State: "done"},
		"commandStatus.error":   {ID: "c", State: CommandFailed, Error: strings.Repeat("e", MaxCommandError+1)},
		"commandStatus.version": {ID: "c", State: CommandFailed, Version: strings.Repeat("v", MaxTextField+1)},
	} {
		var be *BoundError
		if err := CheckCommandStatus(&st); !errors.As(err, &be) || be.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestClampedCommandStatusIsAccepted: whatever the agent makes of a status
// with a valid id, the relay accepts once clamped; one without a valid id
// is not sent.
func TestClampedCommandStatusIsAccepted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	junk := func(n int) string {
		b := make([]byte, rng.IntN(n))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	states := []string{CommandAccepted, CommandDownloading, CommandInstalling, CommandHealthy, CommandFailed, CommandRolledBack, CommandRebooting, "", "done"}
	for range 2000 {
		st := CommandStatus{ID: "c" + strings.Repeat("x", rng.IntN(MaxCommandID)), State: states[rng.IntN(len(states))],
			Error: junk(3 * MaxCommandError), Version: junk(3 * MaxTextField)}
		if err := ClampCommandStatus(&st); err != nil {
			t.Fatal(err)
		}
		if err := CheckCommandStatus(&st); err != nil {
			t.Fatalf("clamped status refused: %v", err)
		}
		for _, c := range []Codec{JSON, CBOR} {
			b, err := c.Marshal(&Message{Type: TypeCommandStatus, CommandStatus: &st})
			if err != nil {
				t.Fatal(err)
			}
			var m Message
			if err := c.Unmarshal(b, &m); err != nil || m.CommandStatus == nil || CheckCommandStatus(m.CommandStatus) != nil {
				t.Fatalf("%s: clamped status does not survive the codec: %v", c, err)
			}
		}
	}
	bad := CommandStatus{ID: "a/b", State: CommandFailed}
	if err := ClampCommandStatus(&bad); err == nil {
		t.Fatal("a status with an invalid id is clamped, not refused")
	}
}

// TestMessageSides: every message type is sent by exactly one side.
func TestMessageSides(t *testing.T) {
	for _, typ := range []string{TypeHello, TypeHeartbeat, TypeRecords, TypeConfigApplied, TypeWelcome, TypeAck, TypeConfig, TypeCommand, TypeCommandStatus} {
		if SentByAgent(typ) == SentByRelay(typ) {
			t.Errorf("%s: sent by the agent %v, by the relay %v", typ, SentByAgent(typ), SentByRelay(typ))
		}
	}
	if SentByAgent(TypeCommand) || !SentByRelay(TypeCommand) || !SentByAgent(TypeCommandStatus) || SentByAgent("reboot") || SentByRelay("reboot") {
		t.Error("command types on the wrong side")
	}
}

// TestArchOf: the architectures releases are added for, from the build's
// GOARCH and GOARM.
func TestArchOf(t *testing.T) {
	for _, c := range []struct{ goarch, goarm, want string }{
		{"amd64", "", "amd64"}, {"arm64", "", "arm64"}, {"arm", "7", "armv7"}, {"arm", "", "armv7"},
		{"arm", "6,softfloat", "armv6"}, {"riscv64", "", "riscv64"},
	} {
		if got := ArchOf(c.goarch, c.goarm); got != c.want {
			t.Errorf("ArchOf(%q, %q) = %q, want %q", c.goarch, c.goarm, got, c.want)
		}
	}
}

// TestHTTPBase: the agent's HTTP routes go to the relay --relay names,
// whichever scheme it was given in.
func TestHTTPBase(t *testing.T) {
	for in, want := range map[string]string{
		"ws://r:8080/": "http://r:8080", "wss://r": "https://r", "https://r/": "https://r", "http://r": "http://r",
	} {
		if got := HTTPBase(in); got != want {
			t.Errorf("HTTPBase(%q) = %q, want %q", in, got, want)
		}
	}
}
