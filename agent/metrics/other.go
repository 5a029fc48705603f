//go:build !linux

package metrics

import (
	"errors"

	"github.com/fleet/fleet/shared/resource"
)

// Disk measures diskUsedPct; it is implemented on Linux only.
type Disk struct{ path string }

// NewDisk returns the disk collector for the filesystem holding path.
func NewDisk(path string) *Disk { return &Disk{path: path} }

// Update returns errors.ErrUnsupported off Linux.
func (d *Disk) Update(s *resource.MetricSample) error { return errors.ErrUnsupported }

// Thermal reads tempCpu; it is implemented on Linux only.
type Thermal struct{ root string }

// NewThermal returns the thermal collector reading sysRoot/class/thermal.
func NewThermal(sysRoot string) *Thermal { return &Thermal{root: sysRoot} }

// Update lists tempCpu as missing (no sensor) off Linux.
func (t *Thermal) Update(s *resource.MetricSample) error {
	s.Missing = append(s.Missing, "tempCpu")
	return nil
}
