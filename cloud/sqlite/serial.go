package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// SerialService implements cloud.SerialService on the store: the desired
// configuration lives in serial_state and serial_channels, the channel
// layout and defaults come from the hardware catalog.
type SerialService struct {
	db *DB
	// Observer, when set before use, is told after a change of the desired
	// configuration has been committed.
	Observer cloud.DesiredConfigObserver
}

var _ cloud.SerialService = (*SerialService)(nil)

// NewSerialService returns the serial service of db.
func NewSerialService(db *DB) *SerialService { return &SerialService{db: db} }

// serialModel returns the catalog model of the organization's device, or
// ENOTFOUND, or ECAPABILITY when it has no serial I/O.
func (db *DB) serialModel(ctx context.Context, orgID, deviceID string) (catalog.Model, error) {
	name, err := db.deviceModel(ctx, orgID, deviceID)
	if err != nil {
		return catalog.Model{}, err
	}
	return cloud.SerialModel(name)
}

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

func readChannels(ctx context.Context, q querier, deviceID string) (map[string]*cloud.StoredChannel, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+sqlstore.ChannelColumns+` FROM serial_channels WHERE device_id = ?`, deviceID)
	chans, err := collect(rows, err, "serial channels", sqlstore.ScanChannel)
	if err != nil {
		return nil, err
	}
	return sqlstore.ChannelsByID(chans), nil
}

// Serial returns the device's full industrial I/O state.
func (s *SerialService) Serial(ctx context.Context, orgID, deviceID string) (resource.SerialState, error) {
	m, err := s.db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	st, err := readState(ctx, s.db.R, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	rows, err := readChannels(ctx, s.db.R, deviceID)
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
	err := s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		q, args := sqlstore.SerialPatchSQL(p, deviceID, sqlstore.Question)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		var err error
		st, err = readState(ctx, tx, deviceID)
		return err
	})
	if err != nil {
		return resource.SerialPatchResult{}, fmt.Errorf("sqlite: patch serial: %w", err)
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
	st, err := readState(ctx, s.db.R, deviceID)
	if err != nil {
		return resource.SerialTelemetry{}, err
	}
	rows, err := readChannels(ctx, s.db.R, deviceID)
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
	err = s.db.R.QueryRowContext(ctx, `SELECT config, available, live, tx_on, error, passthrough_address FROM serial_channels WHERE device_id = ? AND channel_id = ?`, deviceID, channelID).
		Scan(&row.Config, &row.Available, &row.Live, &row.TxOn, &row.Error, &row.Passthrough)
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.ChannelView(c, nil)
	}
	if err != nil {
		return resource.Channel{}, fmt.Errorf("sqlite: serial channel: %w", err)
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
		return resource.ChannelPutResult{}, fmt.Errorf("sqlite: put channel: %w", err)
	}
	err = s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		var avail sql.NullBool
		err := tx.QueryRowContext(ctx, `SELECT available FROM serial_channels WHERE device_id = ? AND channel_id = ?`, deviceID, channelID).Scan(&avail)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if avail.Valid && !avail.Bool {
			return cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on the device", channelID)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO serial_channels (device_id, channel_id, config) VALUES (?, ?, ?)
			ON CONFLICT (device_id, channel_id) DO UPDATE SET config = excluded.config`, deviceID, channelID, string(body)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE serial_state SET desired_version = desired_version + 1 WHERE device_id = ?`, deviceID)
		return err
	})
	if err != nil {
		if cloud.ErrorCode(err) != cloud.EINTERNAL {
			return resource.ChannelPutResult{}, err
		}
		return resource.ChannelPutResult{}, fmt.Errorf("sqlite: put channel: %w", err)
	}
	if s.Observer != nil {
		s.Observer.DesiredConfigChanged(deviceID)
	}
	return resource.ChannelPutResult{DeviceID: deviceID, ChannelID: channelID, Config: cfg}, nil
}

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
	m, err := db.serialModel(ctx, orgID, deviceID)
	if err != nil {
		return DesiredSerial{}, err
	}
	st, err := readState(ctx, db.R, deviceID)
	if err != nil {
		return DesiredSerial{}, err
	}
	rows, err := readChannels(ctx, db.R, deviceID)
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
