// Package linux is the hw.Backend of a real gateway: it opens each channel
// on its OS device with the driver of its group — rs485 with hw/modbus on
// a tty, uart with hw/uart on a tty, canfd with hw/canfd on a SocketCAN
// interface, gpio with hw/gpio on a GPIO character device line — and
// reports whether a channel's device exists (tty path, network interface,
// /dev/gpiochipN), so the agent can mark a channel unavailable and open it
// when its device appears.
//
// The drivers' kernel paths are Linux only (on other systems the canfd and
// gpio constructors return errors.ErrUnsupported); the dispatch and
// presence logic here is plain Go and is tested anywhere.
package linux

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/hw/gpio"
	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/uart"
	"github.com/fleet/fleet/shared/serialcfg"
)

// OpenFunc opens one channel on its device. Each group has one.
type OpenFunc func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error)

// Backend is the Linux hw.Backend. The zero value uses the real drivers
// and the real /dev.
type Backend struct {
	// Logger receives the drivers' records; nil discards.
	Logger *slog.Logger
	// GPIODir is where gpiochipN devices live; "" is /dev.
	GPIODir string
	// InterfaceByName looks up network interfaces; nil is
	// net.InterfaceByName.
	InterfaceByName func(name string) (*net.Interface, error)
	// Drivers overrides the driver of a group (tests); nil entries use the
	// real drivers.
	Drivers map[string]OpenFunc
}

var _ hw.Backend = (*Backend)(nil)

func (b *Backend) log() *slog.Logger {
	if b.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Logger
}

// Present reports whether the channel's OS device exists now: the tty path
// for uart and rs485, the network interface for canfd, the chip for gpio.
func (b *Backend) Present(ch catalog.Channel, device string) bool {
	switch ch.Group {
	case serialcfg.KindUART, serialcfg.KindRS485:
		fi, err := os.Stat(device)
		return err == nil && !fi.IsDir()
	case serialcfg.KindCANFD:
		byName := b.InterfaceByName
		if byName == nil {
			byName = net.InterfaceByName
		}
		_, err := byName(device)
		return err == nil
	case serialcfg.KindGPIO:
		chip, _, err := gpio.ParseDevice(device)
		if err != nil {
			return false
		}
		dir := b.GPIODir
		if dir == "" {
			dir = "/dev"
		}
		_, err = os.Stat(filepath.Join(dir, chip))
		return err == nil
	}
	return false
}

// Open opens ch on device with the driver of its group and applies cfg. A
// device that is not there returns an error wrapping hw.ErrDeviceMissing.
func (b *Backend) Open(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config) (hw.Port, error) {
	if cfg.Kind != ch.Group {
		return nil, fmt.Errorf("%s: config kind %q on a %s channel", ch.ID, cfg.Kind, ch.Group)
	}
	open := b.Drivers[ch.Group]
	if open == nil {
		open = defaultOpen(ch.Group)
	}
	if open == nil {
		return nil, fmt.Errorf("%s: no driver for group %q", ch.ID, ch.Group)
	}
	if !b.Present(ch, device) {
		return nil, fmt.Errorf("%s: %s: %w", ch.ID, device, hw.ErrDeviceMissing)
	}
	log := b.log().With("channel", ch.ID, "device", device)
	p, err := open(ctx, ch, device, cfg, log)
	if err != nil {
		// The device may have gone between the check and the open.
		if !errors.Is(err, hw.ErrDeviceMissing) && (errors.Is(err, fs.ErrNotExist) || !b.Present(ch, device)) {
			err = fmt.Errorf("%w: %w", hw.ErrDeviceMissing, err)
		}
		return nil, err
	}
	return p, nil
}

func defaultOpen(group string) OpenFunc {
	switch group {
	case serialcfg.KindRS485:
		return func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			return modbus.Open(ctx, device, cfg, log)
		}
	case serialcfg.KindUART:
		return func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			return uart.Open(ctx, device, cfg, log)
		}
	case serialcfg.KindCANFD:
		return func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			return canfd.OpenSocketCAN(ctx, ch.ID, device, cfg, log)
		}
	case serialcfg.KindGPIO:
		return func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			return gpio.OpenPort(ctx, ch.ID, device, cfg, log)
		}
	}
	return nil
}
