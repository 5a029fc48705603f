package gpio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
	"periph.io/x/conn/v3/driver"
	"periph.io/x/conn/v3/driver/driverreg"
	"periph.io/x/host/v3/gpioioctl"

	"github.com/fleet/fleet/shared/serialcfg"
)

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
	chip, err := chips.find(chipName)
	if err != nil {
		return nil, fmt.Errorf("gpio %s: %w", dev, err)
	}
	if n >= chip.LineCount() {
		return nil, fmt.Errorf("gpio %s: %s has %d lines", dev, chipName, chip.LineCount())
	}
	return chip.ByNumber(n), nil
}

// chips finds GPIO chips through periph's gpioioctl driver. Its registry
// (driverreg) enumerates /dev/gpiochip* once per process, into the
// package-wide gpioioctl.Chips; a chip that appears later (an expander
// plugged in, a simulator created) or comes back under the same name is
// found by running the driver's enumeration again here, when the chip
// nodes in /dev changed since the last one.
var chips chipSet

type chipSet struct {
	mu  sync.Mutex
	drv driver.Impl
	// nodes are the /dev/gpiochip* nodes (name and inode) at the last
	// enumeration: a node made again (the chip went and came back) is
	// another device.
	nodes map[string]uint64
	// retired are chips dropped from gpioioctl.Chips: duplicates of a
	// new enumeration and chips whose node went away. They stay
	// referenced and open: a GPIOChip closes its file through two
	// os.File values (twice, once by the garbage collector), and its
	// Close closes descriptor 0 as well.
	retired []*gpioioctl.GPIOChip
}

func (s *chipSet) find(name string) (*gpioioctl.GPIOChip, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drv == nil {
		nodes := chipNodes()
		st, err := driverreg.Init()
		if err != nil {
			return nil, fmt.Errorf("periph init: %w", err)
		}
		if s.drv = ioctlDriver(st); s.drv == nil {
			return nil, errors.New("periph's gpioioctl driver is not registered")
		}
		s.nodes = nodes
	}
	nodes := chipNodes()
	if c := chipNamed(name); c != nil && nodes[name] == s.nodes[name] {
		return c, nil
	}
	if maps.Equal(nodes, s.nodes) {
		return nil, fmt.Errorf("%w: %s was not enumerated", ErrNoChip, name)
	}
	// Enumerate again. The driver appends every chip it finds: keep the
	// known ones whose node is unchanged (running ports hold their
	// lines), add the new ones.
	known := len(gpioioctl.Chips)
	_, err := s.drv.Init()
	var kept []*gpioioctl.GPIOChip
	for i, c := range gpioioctl.Chips {
		same := nodes[c.Name()] != 0 && nodes[c.Name()] == s.nodes[c.Name()]
		dup := slices.ContainsFunc(kept, func(k *gpioioctl.GPIOChip) bool { return k.Name() == c.Name() })
		if (i < known && !same) || dup {
			s.retired = append(s.retired, c)
			continue
		}
		kept = append(kept, c)
	}
	gpioioctl.Chips = kept
	s.nodes = nodes
	if c := chipNamed(name); c != nil {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoChip, err)
	}
	return nil, ErrNoChip
}

// chipNodes returns the inode of each /dev/gpiochip* node by chip name.
func chipNodes() map[string]uint64 {
	paths, _ := filepath.Glob("/dev/gpiochip*")
	nodes := make(map[string]uint64, len(paths))
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			nodes[filepath.Base(p)] = st.Ino
		}
	}
	return nodes
}

// ioctlDriver returns gpioioctl's driver from periph's registry, loaded
// or skipped (it skips itself when no chip exists yet).
func ioctlDriver(st *driverreg.State) driver.Impl {
	all := slices.Clone(st.Loaded)
	for _, f := range append(st.Skipped, st.Failed...) {
		all = append(all, f.D)
	}
	for _, d := range all {
		if d.String() == "ioctl-gpio" {
			return d
		}
	}
	return nil
}

func chipNamed(name string) *gpioioctl.GPIOChip {
	for _, c := range gpioioctl.Chips {
		if c.Name() == name {
			return c
		}
	}
	return nil
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
