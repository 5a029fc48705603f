package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func readState(ctx context.Context, q querier, deviceID string) (sqlstore.SerialState, error) {
	s, err := sqlstore.ScanSerialState(q.QueryRowContext(ctx, `SELECT `+sqlstore.SerialStateColumns+` FROM serial_state WHERE device_id = ?`, deviceID))
	if errors.Is(err, sql.ErrNoRows) {
		return sqlstore.DefaultSerialState(), nil
	}
	if err != nil {
		return s, fmt.Errorf("sqlite: serial state: %w", err)
	}
	return s, nil
}

// SerialRows implements sqlstore.SerialTables.
func (t tables) SerialRows(ctx context.Context, deviceID string) (sqlstore.SerialState, map[string]*cloud.StoredChannel, error) {
	st, err := readState(ctx, t.db.R, deviceID)
	if err != nil {
		return st, nil, err
	}
	rows, err := t.db.R.QueryContext(ctx, `SELECT `+sqlstore.ChannelColumns+` FROM serial_channels WHERE device_id = ?`, deviceID)
	chans, err := collect(rows, err, "serial channels", sqlstore.ScanChannel)
	if err != nil {
		return st, nil, err
	}
	return st, sqlstore.ChannelsByID(chans), nil
}

// StoredChannel implements sqlstore.SerialTables.
func (t tables) StoredChannel(ctx context.Context, deviceID, channelID string) (*cloud.StoredChannel, error) {
	var row cloud.StoredChannel
	err := t.db.R.QueryRowContext(ctx, `SELECT config, available, live, tx_on, error, passthrough_address FROM serial_channels WHERE device_id = ? AND channel_id = ?`, deviceID, channelID).
		Scan(&row.Config, &row.Available, &row.Live, &row.TxOn, &row.Error, &row.Passthrough)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: serial channel: %w", err)
	}
	return &row, nil
}

// PatchSerial implements sqlstore.SerialTables.
func (t tables) PatchSerial(ctx context.Context, deviceID string, p cloud.SerialPatch) (sqlstore.SerialState, error) {
	var st sqlstore.SerialState
	err := t.db.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		q, args := sqlstore.SerialPatchSQL(p, deviceID)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		var err error
		st, err = readState(ctx, tx, deviceID)
		return err
	})
	if err != nil {
		return st, fmt.Errorf("sqlite: patch serial: %w", err)
	}
	return st, nil
}

// PutChannel implements sqlstore.SerialTables.
func (t tables) PutChannel(ctx context.Context, deviceID, channelID, config string) error {
	err := t.db.WriteTx(ctx, func(tx *sql.Tx) error {
		var avail sql.NullBool
		err := tx.QueryRowContext(ctx, `SELECT available FROM serial_channels WHERE device_id = ? AND channel_id = ?`, deviceID, channelID).Scan(&avail)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if avail.Valid && !avail.Bool {
			return cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on the device", channelID)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO serial_channels (device_id, channel_id, config) VALUES (?, ?, ?)
			ON CONFLICT (device_id, channel_id) DO UPDATE SET config = excluded.config`, deviceID, channelID, config); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE serial_state SET desired_version = desired_version + 1 WHERE device_id = ?`, deviceID)
		return err
	})
	return wrapErr("put channel", err)
}
