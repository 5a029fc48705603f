//go:build !linux

package gpio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fleet/fleet/shared/serialcfg"
)

// ErrNoChip is returned by OpenLine when the chip is not there.
var ErrNoChip = errors.New("gpio chip not found")

// ChipPresent reports false: GPIO character devices are Linux only.
func ChipPresent(chip string) bool { return false }

// OpenPort is only available on Linux.
func OpenPort(ctx context.Context, name, dev string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	return nil, fmt.Errorf("gpio %s: GPIO character device: %w", name, errors.ErrUnsupported)
}
