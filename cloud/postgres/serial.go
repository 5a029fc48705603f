package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// SerialService implements cloud.SerialService on the store: the desired
// configuration lives in serial_state and serial_channels, the layout and
// defaults come from the hardware catalog.
type SerialService struct {
	db *DB
	// Observer, when set before use, is told after a change of the desired
	// configuration has been committed.
	Observer cloud.DesiredConfigObserver
}

var _ cloud.SerialService = (*SerialService)(nil)

// serialModel returns the catalog model of the organization's device, or
// ENOTFOUND, or ECAPABILITY when it has no serial I/O.
func (db *DB) serialModel(ctx context.Context, orgID, deviceID string) (catalog.Model, error) {
	name, err := db.deviceModel(ctx, orgID, deviceID)
	if err != nil {
		return catalog.Model{}, err
	}
	return cloud.SerialModel(name)
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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

func readChannels(ctx context.Context, q querier, deviceID string) (map[string]*cloud.StoredChannel, error) {
	rows, err := q.Query(ctx, `SELECT `+sqlstore.ChannelColumns+` FROM serial_channels WHERE device_id = $1`, deviceID)
	if err != nil {
		return nil, storeError("postgres: serial channels: %w", err)
	}
	chans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlstore.Channel, error) { return sqlstore.ScanChannel(r) })
	if err != nil {
		return nil, storeError("postgres: serial channels: %w", err)
	}
	return sqlstore.ChannelsByID(chans), nil
}

// Serial returns the device's full industrial I/O state.
func (s *SerialService) Serial(ctx context.Context, orgID, deviceID string) (resource.SerialState, error) {
	m, err := s.db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	st, err := readState(ctx, s.db.Pool, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	rows, err := readChannels(ctx, s.db.Pool, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	return cloud.SerialView(deviceID, m, st.View(), rows)
}

// PatchSerial changes the usage mode and the forwarding, bumping the desired
// version, and tells the Observer after the commit.
func (s *SerialService) PatchSerial(ctx context.Context, orgID, deviceID string, p cloud.SerialPatch) (resource.SerialPatchResult, error) {
	if err := p.Validate(); err != nil {
		return resource.SerialPatchResult{}, err
	}
	if _, err := s.db.serialModel(ctx, orgID, deviceID); err != nil {
		return resource.SerialPatchResult{}, err
	}
	var st sqlstore.SerialState
	err := s.db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES ($1) ON CONFLICT DO NOTHING`, deviceID); err != nil {
			return err
		}
		q, args := sqlstore.SerialPatchSQL(p, deviceID, sqlstore.Dollar)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
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
		return resource.SerialPatchResult{}, storeError("postgres: patch serial: %w", err)
	}
	if s.Observer != nil {
		s.Observer.DesiredConfigChanged(deviceID)
	}
	return resource.SerialPatchResult{DeviceID: deviceID, Mode: st.Mode, Forwarding: st.Forwarding()}, nil
}

// Telemetry returns the last values the device reported, one entry per
// channel of its model.
func (s *SerialService) Telemetry(ctx context.Context, orgID, deviceID string) (resource.SerialTelemetry, error) {
	m, err := s.db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return resource.SerialTelemetry{}, err
	}
	st, err := readState(ctx, s.db.Pool, deviceID)
	if err != nil {
		return resource.SerialTelemetry{}, err
	}
	rows, err := readChannels(ctx, s.db.Pool, deviceID)
	if err != nil {
		return resource.SerialTelemetry{}, err
	}
	return cloud.TelemetryView(deviceID, m, resource.TP(sqlstore.MsTime(st.TelemetryAt)), rows), nil
}

// Channel returns one channel; ENOTFOUND when the model has no such channel.
func (s *SerialService) Channel(ctx context.Context, orgID, deviceID, channelID string) (resource.Channel, error) {
	m, err := s.db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return resource.Channel{}, err
	}
	c, ok := m.Channel(channelID)
	if !ok {
		return resource.Channel{}, cloud.ErrChannelNotFound(channelID)
	}
	var row cloud.StoredChannel
	err = s.db.Pool.QueryRow(ctx, `SELECT config, available, live, tx_on, error, passthrough_address FROM serial_channels WHERE device_id = $1 AND channel_id = $2`, deviceID, channelID).
		Scan(&row.Config, &row.Available, &row.Live, &row.TxOn, &row.Error, &row.Passthrough)
	if errors.Is(err, pgx.ErrNoRows) {
		return cloud.ChannelView(c, nil)
	}
	if err != nil {
		return resource.Channel{}, storeError("postgres: serial channel: %w", err)
	}
	return cloud.ChannelView(c, &row)
}

// PutChannel stores the channel's desired configuration, bumping the
// desired version, and tells the Observer after the commit.
func (s *SerialService) PutChannel(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config) (resource.ChannelPutResult, error) {
	m, err := s.db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return resource.ChannelPutResult{}, err
	}
	if err := cloud.CheckChannelPut(m, channelID, cfg); err != nil {
		return resource.ChannelPutResult{}, err
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return resource.ChannelPutResult{}, storeError("postgres: put channel: %w", err)
	}
	err = s.db.writeTx(ctx, func(tx pgx.Tx) error {
		var avail *bool
		err := tx.QueryRow(ctx, `SELECT available FROM serial_channels WHERE device_id = $1 AND channel_id = $2`, deviceID, channelID).Scan(&avail)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if avail != nil && !*avail {
			return cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on the device", channelID)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_channels (device_id, channel_id, config) VALUES ($1, $2, $3)
			ON CONFLICT (device_id, channel_id) DO UPDATE SET config = excluded.config`, deviceID, channelID, string(body)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id, desired_version) VALUES ($1, 1)
			ON CONFLICT (device_id) DO UPDATE SET desired_version = serial_state.desired_version + 1`, deviceID); err != nil {
			return err
		}
		return notifyConfig(ctx, tx, deviceID)
	})
	if err != nil {
		if cloud.ErrorCode(err) != cloud.EINTERNAL {
			return resource.ChannelPutResult{}, err
		}
		return resource.ChannelPutResult{}, storeError("postgres: put channel: %w", err)
	}
	if s.Observer != nil {
		s.Observer.DesiredConfigChanged(deviceID)
	}
	return resource.ChannelPutResult{DeviceID: deviceID, ChannelID: channelID, Config: cfg}, nil
}

// notifyConfig tells every relay listening (Listen) that deviceID's
// desired configuration changed; PostgreSQL delivers it when tx commits,
// and not at all when it rolls back.
func notifyConfig(ctx context.Context, tx pgx.Tx, deviceID string) error {
	return notify(ctx, tx, channelConfig, deviceID)
}

// channelConfig is the NOTIFY channel of desired-configuration changes.
const channelConfig = "fleet_config"
