package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// SetChannelTelemetry stores the channels' last reported values and sets the
// device's telemetry time to at.
func (db *DB) SetChannelTelemetry(ctx context.Context, deviceID string, at time.Time, channels []resource.ChannelTelemetry) error {
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		for _, c := range channels {
			if _, err := tx.ExecContext(ctx, `INSERT INTO serial_channels (device_id, channel_id, live, tx_on, error) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (device_id, channel_id) DO UPDATE SET live = excluded.live, tx_on = excluded.tx_on, error = excluded.error`,
				deviceID, c.ID, c.Live, c.TxOn, c.Error); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE serial_state SET telemetry_at = ? WHERE device_id = ?`, at.UnixMilli(), deviceID)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: set channel telemetry: %w", err)
	}
	return nil
}

// SetChannelAvailable stores whether the agent reported the channel usable.
func (db *DB) SetChannelAvailable(ctx context.Context, deviceID, channelID string, available bool) error {
	_, err := db.W.ExecContext(ctx, `INSERT INTO serial_channels (device_id, channel_id, available) VALUES (?, ?, ?)
		ON CONFLICT (device_id, channel_id) DO UPDATE SET available = excluded.available`, deviceID, channelID, available)
	if err != nil {
		return fmt.Errorf("sqlite: set channel available: %w", err)
	}
	return nil
}
