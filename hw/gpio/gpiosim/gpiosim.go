// Package gpiosim makes chips of the Linux GPIO simulator (the gpio-sim
// module) through configfs, for kernel tests: named lines, a simulated
// pull on each input (what an external pull-up or a switch would do) and
// the value the line carries, read and set through the simulator's sysfs
// attributes. It needs gpio-sim loaded and configfs mounted at
// /sys/kernel/config, as the qemu rig's guest has them.
package gpiosim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ConfigRoot is where gpio-sim's configfs directory is mounted.
const ConfigRoot = "/sys/kernel/config/gpio-sim"

// Chip is one simulated GPIO chip with one bank of lines.
type Chip struct {
	dir string
	// Name is the chip's character device name under /dev ("gpiochip1").
	Name string
	// Device is the simulator's platform device ("gpio-sim.0").
	Device string
}

// New makes and enables chip dir with lines lines; names gives line
// offsets their names.
func New(dir string, lines int, names map[int]string) (*Chip, error) {
	c := &Chip{dir: filepath.Join(ConfigRoot, dir)}
	bank := filepath.Join(c.dir, "bank0")
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("gpio-sim: %w (is gpio-sim loaded and configfs mounted?)", err)
	}
	steps := []func() error{
		func() error { return os.Mkdir(bank, 0o755) },
		func() error { return write(filepath.Join(bank, "num_lines"), strconv.Itoa(lines)) },
	}
	for off, name := range names {
		line := filepath.Join(bank, "line"+strconv.Itoa(off))
		steps = append(steps,
			func() error { return os.Mkdir(line, 0o755) },
			func() error { return write(filepath.Join(line, "name"), name) })
	}
	steps = append(steps, func() error { return write(filepath.Join(c.dir, "live"), "1") })
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, errors.Join(fmt.Errorf("gpio-sim %s: %w", dir, err), c.Remove())
		}
	}
	var err error
	if c.Name, err = read(filepath.Join(bank, "chip_name")); err != nil {
		return nil, errors.Join(err, c.Remove())
	}
	if c.Device, err = read(filepath.Join(c.dir, "dev_name")); err != nil {
		return nil, errors.Join(err, c.Remove())
	}
	return c, nil
}

// Line returns the catalog device of a line, "gpiochipN:OFFSET".
func (c *Chip) Line(offset int) string { return c.Name + ":" + strconv.Itoa(offset) }

// Remove disables the chip and removes its configfs directories.
func (c *Chip) Remove() error {
	if _, err := os.Stat(c.dir); err != nil {
		return nil
	}
	var errs []error
	if live, _ := read(filepath.Join(c.dir, "live")); live == "1" {
		errs = append(errs, write(filepath.Join(c.dir, "live"), "0"))
	}
	bank := filepath.Join(c.dir, "bank0")
	lines, _ := filepath.Glob(filepath.Join(bank, "line*"))
	for _, l := range append(lines, bank, c.dir) {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Chip) attr(offset int, name string) string {
	return filepath.Join("/sys/devices/platform", c.Device, c.Name, "sim_gpio"+strconv.Itoa(offset), name)
}

// Value returns the level the line carries: the level driven on an
// output, the simulated pull on an input ("0" or "1").
func (c *Chip) Value(offset int) (string, error) { return read(c.attr(offset, "value")) }

// SetPull sets the simulated external pull of a line, up (true) or down:
// an input changes level (and raises an edge) with it.
func (c *Chip) SetPull(offset int, up bool) error {
	v := "pull-down"
	if up {
		v = "pull-up"
	}
	return write(c.attr(offset, "pull"), v)
}

func write(path, v string) error {
	return os.WriteFile(path, []byte(v), 0o644)
}

func read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
