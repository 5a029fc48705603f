package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs/sysfs"

	"github.com/fleet/fleet/shared/resource"
)

// Thermal reads tempCpu (°C) from /sys/class/thermal. Among the zones whose
// temperature reads, it takes the hottest zone whose type names the CPU
// ("x86_pkg_temp", "cpu…", "soc…", "…cpu…"); when no zone names the CPU, the
// hottest zone. A machine without thermal zones reads the hwmon sensors
// (/sys/class/hwmon/hwmon*/temp*_input) the same way, by the chip's name
// ("coretemp", "k10temp", "cpu_thermal", …). A machine with neither (many
// VMs and containers) has no sensor: tempCpu 0, listed in the sample's
// Missing, and no error; an error is returned only when zones exist and
// none can be read.
type Thermal struct{ root string }

// NewThermal returns the thermal collector reading sysRoot/class/thermal.
func NewThermal(sysRoot string) *Thermal { return &Thermal{root: sysRoot} }

// Update sets TempCPU.
func (t *Thermal) Update(s *resource.MetricSample) error {
	sfs, err := sysfs.NewFS(t.root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return t.hwmon(s)
		}
		return fmt.Errorf("sysfs: %w", err)
	}
	zones, err := sfs.ClassThermalZoneStats()
	if err != nil {
		return fmt.Errorf("thermal zones: %w", err)
	}
	var (
		best, bestCPU int64
		any, anyCPU   bool
		firstErr      error
	)
	for _, z := range zones {
		if z.Type == "" || z.ReadErrors != nil && z.Temp == 0 {
			if firstErr == nil {
				firstErr = fmt.Errorf("thermal_zone%s: %w", z.Name, z.ReadErrors)
			}
			continue
		}
		if !any || z.Temp > best {
			best, any = z.Temp, true
		}
		if isCPUZone(z.Type) && (!anyCPU || z.Temp > bestCPU) {
			bestCPU, anyCPU = z.Temp, true
		}
	}
	switch {
	case anyCPU:
		s.TempCPU = round2(float64(bestCPU) / 1000)
	case any:
		s.TempCPU = round2(float64(best) / 1000)
	case firstErr != nil:
		return firstErr
	default:
		return t.hwmon(s)
	}
	return nil
}

// hwmon sets TempCPU from the hwmon sensors: the hottest input of a chip
// whose name names the CPU, else the hottest input; without any, it lists
// tempCpu as missing (no sensor). Inputs that cannot be read are skipped.
func (t *Thermal) hwmon(s *resource.MetricSample) error {
	inputs, _ := filepath.Glob(filepath.Join(t.root, "class", "hwmon", "hwmon*", "temp*_input"))
	var (
		best, bestCPU int64
		any, anyCPU   bool
	)
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		name, _ := os.ReadFile(filepath.Join(filepath.Dir(in), "name"))
		if !any || v > best {
			best, any = v, true
		}
		if isCPUChip(strings.TrimSpace(string(name))) && (!anyCPU || v > bestCPU) {
			bestCPU, anyCPU = v, true
		}
	}
	switch {
	case anyCPU:
		s.TempCPU = round2(float64(bestCPU) / 1000)
	case any:
		s.TempCPU = round2(float64(best) / 1000)
	default:
		s.TempCPU = 0
		s.Missing = append(s.Missing, "tempCpu")
	}
	return nil
}

// isCPUChip reports whether a hwmon chip's name names the CPU (Intel's
// coretemp, AMD's k10temp and zenpower, ARM SoCs' cpu_thermal, …).
func isCPUChip(name string) bool {
	n := strings.ToLower(name)
	return n == "coretemp" || n == "k10temp" || n == "zenpower" || isCPUZone(n)
}

func isCPUZone(typ string) bool {
	t := strings.ToLower(typ)
	return t == "x86_pkg_temp" || strings.HasPrefix(t, "soc") || strings.Contains(t, "cpu")
}
