// Package hw is the seam between the agent and a gateway's I/O hardware. A
// Backend opens a Port for each channel of the model's catalog layout; the
// Linux backend drives real devices (serial ttys, SocketCAN, GPIO character
// devices) and the simulator backend attaches simulated peers. The bus
// drivers live in subpackages, one per bus.
package hw

import (
	"context"
	"errors"

	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/serialcfg"
)

// ErrDeviceMissing is returned by Backend.Open when the channel's OS device
// does not exist (yet); the agent marks the channel unavailable and retries.
var ErrDeviceMissing = errors.New("device missing")

// Port is one open channel.
type Port interface {
	// Apply (re)configures the running channel without closing it. An
	// invalid or inapplicable configuration returns an error and leaves the
	// previous configuration running.
	Apply(ctx context.Context, cfg serialcfg.Config) error
	// Telemetry returns the latest state of the channel.
	Telemetry() serialcfg.Telemetry
	// Close stops the channel and releases its device.
	Close() error
}

// Backend opens ports.
type Backend interface {
	// Open opens the channel on device (the catalog's or an override) and
	// applies cfg. It returns an error wrapping ErrDeviceMissing when the
	// device is not there.
	Open(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config) (Port, error)
	// Present reports whether device exists now.
	Present(ch catalog.Channel, device string) bool
}
