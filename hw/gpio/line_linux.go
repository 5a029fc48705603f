package gpio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"periph.io/x/conn/v3/driver/driverreg"
	"periph.io/x/host/v3/gpioioctl"

	"github.com/fleet/fleet/shared/serialcfg"
)

// initOnce guards periph's driver registry, which is process-wide:
// gpioioctl enumerates /dev/gpiochip* once, at the first OpenLine.
var initOnce = sync.OnceValue(func() error {
	_, err := driverreg.Init()
	return err
})

// ErrNoChip is returned by OpenLine when the chip is not there.
var ErrNoChip = errors.New("gpio chip not found")

// ChipPresent reports whether /dev/<chip> exists.
func ChipPresent(chip string) bool {
	_, err := os.Stat("/dev/" + chip)
	return err == nil
}

// OpenLine resolves "gpiochipN:LINE" to a line of the GPIO character
// device. The line is requested from the kernel when first configured.
func OpenLine(dev string) (*gpioioctl.GPIOLine, error) {
	chipName, n, err := ParseDevice(dev)
	if err != nil {
		return nil, err
	}
	if !ChipPresent(chipName) {
		return nil, fmt.Errorf("%s: %w", dev, ErrNoChip)
	}
	if err := initOnce(); err != nil {
		return nil, fmt.Errorf("gpio: periph init: %w", err)
	}
	for _, chip := range gpioioctl.Chips {
		if chip.Name() != chipName {
			continue
		}
		if n >= chip.LineCount() {
			return nil, fmt.Errorf("gpio %s: %s has %d lines", dev, chipName, chip.LineCount())
		}
		return chip.ByNumber(n), nil
	}
	return nil, fmt.Errorf("%s: %w (appeared after start? periph enumerates chips once)", dev, ErrNoChip)
}

// OpenPort opens channel name on the line dev and applies cfg.
func OpenPort(ctx context.Context, name, dev string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	line, err := OpenLine(dev)
	if err != nil {
		return nil, fmt.Errorf("gpio %s: %w", name, err)
	}
	return New(ctx, Options{
		Name: name, Device: dev, Pin: line, Logger: log,
		Release: func() error { line.Close(); return nil },
	}, cfg)
}
