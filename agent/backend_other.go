//go:build !linux

package agent

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/fleet/fleet/hw"
)

// newLinuxBackend is unsupported off Linux.
func newLinuxBackend(cfg Config, log *slog.Logger) (hw.Backend, error) {
	return nil, fmt.Errorf("--hw linux: %w on this OS", errors.ErrUnsupported)
}
