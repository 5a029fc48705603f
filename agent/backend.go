package agent

import (
	"fmt"
	"log/slog"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/linux"
	"github.com/fleet/fleet/hw/sim"
)

// newBackend returns the hardware backend --hw names: the real drivers
// (hw/linux) or the simulator (hw/sim).
func newBackend(cfg Config, log *slog.Logger) (hw.Backend, error) {
	switch cfg.HW {
	case "sim":
		return &sim.Backend{}, nil
	case "linux":
		return &linux.Backend{Logger: log.With("component", "hw")}, nil
	}
	return nil, fmt.Errorf("--hw %q: want linux or sim", cfg.HW)
}
