//go:build !linux

package canfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fleet/fleet/shared/serialcfg"
)

// OpenSocketCAN is only available on Linux.
func OpenSocketCAN(ctx context.Context, name, iface string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	return nil, fmt.Errorf("canfd %s: SocketCAN: %w", name, errors.ErrUnsupported)
}
