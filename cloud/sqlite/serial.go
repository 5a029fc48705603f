package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
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

// DesiredSerial is a device's desired serial configuration, as the agent
// endpoint sends it: every channel of the model with its stored or default
// configuration.
type DesiredSerial struct {
	Version        int64
	AppliedVersion int64
	Enabled        bool
	Mode           string
	Channels       map[string]serialcfg.Config
}

// DesiredSerialConfig returns the desired serial configuration of a device
// (any organization; the agent endpoint has already authenticated it).
// ECAPABILITY for a model without serial I/O.
func (db *DB) DesiredSerialConfig(ctx context.Context, deviceID string) (DesiredSerial, error) {
	var orgID string
	if err := db.R.QueryRowContext(ctx, `SELECT org_id FROM devices WHERE id = ?`, deviceID).Scan(&orgID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return DesiredSerial{}, deviceNotFound(deviceID)
		}
		return DesiredSerial{}, fmt.Errorf("sqlite: desired serial: %w", err)
	}
	name, err := db.DeviceModel(ctx, orgID, deviceID)
	if err != nil {
		return DesiredSerial{}, err
	}
	m, err := cloud.SerialModel(name)
	if err != nil {
		return DesiredSerial{}, err
	}
	st, rows, err := db.SerialRows(ctx, deviceID)
	if err != nil {
		return DesiredSerial{}, err
	}
	out := DesiredSerial{Version: st.DesiredVersion, AppliedVersion: st.AppliedVersion, Enabled: st.Enabled, Mode: st.Mode, Channels: map[string]serialcfg.Config{}}
	for _, c := range m.Channels {
		ch, err := cloud.ChannelView(c, rows[c.ID])
		if err != nil {
			return DesiredSerial{}, err
		}
		out.Channels[c.ID] = ch.Config
	}
	return out, nil
}

// SetAppliedVersion records the desired version the agent acknowledged.
func (db *DB) SetAppliedVersion(ctx context.Context, deviceID string, version int64) error {
	_, err := db.W.ExecContext(ctx, `UPDATE serial_state SET applied_version = MAX(applied_version, ?) WHERE device_id = ?`, version, deviceID)
	if err != nil {
		return fmt.Errorf("sqlite: set applied version: %w", err)
	}
	return nil
}
