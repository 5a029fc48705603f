package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readState(ctx context.Context, q querier, deviceID string) (sqlstore.SerialState, error) {
	s, err := sqlstore.ScanSerialState(q.QueryRow(ctx, `SELECT `+sqlstore.SerialStateColumns+` FROM serial_state WHERE device_id = $1`, deviceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlstore.DefaultSerialState(), nil
	}
	if err != nil {
		return s, storeError("postgres: serial state: %w", err)
	}
	return s, nil
}

// SerialRows implements sqlstore.SerialTables.
func (t tables) SerialRows(ctx context.Context, deviceID string) (sqlstore.SerialState, map[string]*cloud.StoredChannel, error) {
	st, err := readState(ctx, t.db.Pool, deviceID)
	if err != nil {
		return st, nil, err
	}
	chans, err := query(ctx, t.db, "serial channels", sqlstore.ScanChannel, `SELECT `+sqlstore.ChannelColumns+` FROM serial_channels WHERE device_id = $1`, deviceID)
	if err != nil {
		return st, nil, err
	}
	return st, sqlstore.ChannelsByID(chans), nil
}

// StoredChannel implements sqlstore.SerialTables.
func (t tables) StoredChannel(ctx context.Context, deviceID, channelID string) (*cloud.StoredChannel, error) {
	var row cloud.StoredChannel
	err := t.db.Pool.QueryRow(ctx, `SELECT config, available, live, tx_on, error, passthrough_address FROM serial_channels WHERE device_id = $1 AND channel_id = $2`, deviceID, channelID).
		Scan(&row.Config, &row.Available, &row.Live, &row.TxOn, &row.Error, &row.Passthrough)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, storeError("postgres: serial channel: %w", err)
	}
	return &row, nil
}

// PatchSerial implements sqlstore.SerialTables.
func (t tables) PatchSerial(ctx context.Context, deviceID string, p cloud.SerialPatch) (sqlstore.SerialState, error) {
	var st sqlstore.SerialState
	err := t.db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES ($1) ON CONFLICT DO NOTHING`, deviceID); err != nil {
			return err
		}
		q, args := sqlstore.SerialPatchSQL(p, deviceID)
		if _, err := tx.Exec(ctx, numbered(q), args...); err != nil {
			return err
		}
		if err := notifyConfig(ctx, tx, deviceID); err != nil {
			return err
		}
		var err error
		st, err = readState(ctx, tx, deviceID)
		return err
	})
	if err != nil {
		return st, storeError("postgres: patch serial: %w", err)
	}
	return st, nil
}

// PutChannel implements sqlstore.SerialTables.
func (t tables) PutChannel(ctx context.Context, deviceID, channelID, config string) error {
	err := t.db.writeTx(ctx, func(tx pgx.Tx) error {
		var avail *bool
		err := tx.QueryRow(ctx, `SELECT available FROM serial_channels WHERE device_id = $1 AND channel_id = $2`, deviceID, channelID).Scan(&avail)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if avail != nil && !*avail {
			return cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on the device", channelID)
		}
		// serial_state before serial_channels, the order in which the
		// heartbeat writer locks them (applyHeartbeats): the other order
		// deadlocked with it under load (40P01).
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id, desired_version) VALUES ($1, 1)
			ON CONFLICT (device_id) DO UPDATE SET desired_version = serial_state.desired_version + 1`, deviceID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_channels (device_id, channel_id, config) VALUES ($1, $2, $3)
			ON CONFLICT (device_id, channel_id) DO UPDATE SET config = excluded.config`, deviceID, channelID, config); err != nil {
			return err
		}
		return notifyConfig(ctx, tx, deviceID)
	})
	return wrapErr("put channel", err)
}

// notifyConfig tells every relay listening (Listen) that deviceID's
// desired configuration changed; PostgreSQL delivers it when tx commits,
// and not at all when it rolls back.
func notifyConfig(ctx context.Context, tx pgx.Tx, deviceID string) error {
	return notify(ctx, tx, channelConfig, deviceID)
}

// channelConfig is the NOTIFY channel of desired-configuration changes.
const channelConfig = "fleet_config"
