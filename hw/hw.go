// Package hw is the seam between the agent and a gateway's I/O hardware. A
// Backend opens a Port for each channel of the model's catalog layout; the
// Linux backend drives real devices (serial ttys, SocketCAN, GPIO character
// devices) and the simulator backend attaches simulated peers. The bus
// drivers live in subpackages, one per bus.
package hw

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// CheckConfig returns an error, prefixed with who ("modbus /dev/ttyS2"),
// unless cfg is a valid configuration of kind, the channel's group.
func CheckConfig(who, kind string, cfg serialcfg.Config) error {
	var v interface{ Validate() error }
	switch {
	case cfg.Kind != kind:
	case kind == serialcfg.KindRS485 && cfg.RS485 != nil:
		v = cfg.RS485
	case kind == serialcfg.KindUART && cfg.UART != nil:
		v = cfg.UART
	case kind == serialcfg.KindCANFD && cfg.CANFD != nil:
		v = cfg.CANFD
	case kind == serialcfg.KindGPIO && cfg.GPIO != nil:
		v = cfg.GPIO
	}
	if v == nil {
		return fmt.Errorf("%s: config kind %q on a %s channel", who, cfg.Kind, kind)
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// PointReader is a Port that reads points (serialcfg.Config.PointDefs):
// rs485 registers, canfd signals, a gpio input's level. The agent's sampler
// calls ReadPoints every sampling round.
type PointReader interface {
	// ReadPoints returns the latest reading of each configured point, in
	// configuration order; a point not read yet has a zero At.
	ReadPoints() []PointReading
}

// PointReading is a point's latest reading: Value (a bool as 0 or 1) when
// Err is "", else the cause of the failed read ("modbus exception 2:
// illegal data address (slave 7)"); At is when it was read.
type PointReading struct {
	Name  string
	Value float64
	Err   string
	At    time.Time
}
