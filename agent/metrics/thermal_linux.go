package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/prometheus/procfs/sysfs"

	"github.com/fleet/fleet/shared/resource"
)

// Thermal reads tempCpu (°C) from /sys/class/thermal. Among the zones whose
// temperature reads, it takes the hottest zone whose type names the CPU
// ("x86_pkg_temp", "cpu…", "soc…", "…cpu…"); when no zone names the CPU, the
// hottest zone. A machine without thermal zones (many VMs) reports 0 and no
// error; an error is returned only when zones exist and none can be read.
type Thermal struct{ root string }

// NewThermal returns the thermal collector reading sysRoot/class/thermal.
func NewThermal(sysRoot string) *Thermal { return &Thermal{root: sysRoot} }

// Update sets TempCPU.
func (t *Thermal) Update(s *resource.MetricSample) error {
	sfs, err := sysfs.NewFS(t.root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
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
	}
	return nil
}

func isCPUZone(typ string) bool {
	t := strings.ToLower(typ)
	return t == "x86_pkg_temp" || strings.HasPrefix(t, "soc") || strings.Contains(t, "cpu")
}
