package agent

import (
	"errors"
	"log/slog"

	"github.com/fleet/fleet/hw"
)

// newLinuxBackend returns the Linux hardware backend (hw/linux).
func newLinuxBackend(cfg Config, log *slog.Logger) (hw.Backend, error) {
	return nil, errors.New("--hw linux: the Linux hardware backend (hw/linux) is not part of this build yet; use --hw sim")
}
