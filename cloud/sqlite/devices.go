package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// DeviceDetail implements sqlstore.DeviceTables.
func (t tables) DeviceDetail(ctx context.Context, orgID, id string) (resource.DeviceDetail, error) {
	st, err := t.db.readStmt(ctx, `SELECT `+sqlstore.DeviceColumns+`, notes, agent_device_name, agent_device_location, agent_timezone FROM devices WHERE id = ? AND org_id = ?`)
	if err != nil {
		return resource.DeviceDetail{}, err
	}
	var dd resource.DeviceDetail
	var notes sql.NullString
	dd.Device, err = sqlstore.ScanDevice(st.QueryRowContext(ctx, id, orgID), &notes, &dd.AgentDeviceName, &dd.AgentDeviceLocation, &dd.AgentTimezone)
	if errors.Is(err, sql.ErrNoRows) {
		return resource.DeviceDetail{}, deviceNotFound(id)
	}
	if err != nil {
		return resource.DeviceDetail{}, fmt.Errorf("sqlite: device: %w", err)
	}
	if notes.Valid {
		dd.Notes = &notes.String
	}
	return dd, nil
}

// NewestSamples implements sqlstore.DeviceTables.
func (t tables) NewestSamples(ctx context.Context, deviceID string, from, to time.Time, n int) ([]resource.MetricSample, error) {
	st, err := t.db.readStmt(ctx, metricsSQL)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, deviceID, from.UnixMilli(), to.UnixMilli(), n)
	return collect(rows, err, "metrics", sqlstore.ScanSample)
}

// DevicePage implements sqlstore.DeviceTables.
func (t tables) DevicePage(ctx context.Context, k sqlstore.Keyset[resource.Device]) (resource.List[resource.Device], error) {
	return listPage(ctx, t.db, k)
}

// EventPage implements sqlstore.DeviceTables.
func (t tables) EventPage(ctx context.Context, k sqlstore.Keyset[resource.Event]) (resource.List[resource.Event], error) {
	return listPage(ctx, t.db, k)
}

// The point reads of the request path (explain_test.go checks that each,
// and each list query, is served by an index).
const deviceModelSQL = `SELECT model FROM devices WHERE id = ? AND org_id = ?`

const metricsSQL = sqlstore.SamplesSQL

// cursorTime returns the created_at of the cursor item that query (taking
// the cursor and one scope argument) finds, or ECURSOR.
func (db *DB) cursorTime(ctx context.Context, query, cursor, scope string) (int64, error) {
	if !ids.Valid(cursor) {
		return 0, cloud.ErrCursor()
	}
	st, err := db.readStmt(ctx, query)
	if err != nil {
		return 0, err
	}
	var at int64
	err = st.QueryRowContext(ctx, cursor, scope).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, cloud.ErrCursor()
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: cursor: %w", err)
	}
	return at, nil
}

// DeviceModel implements sqlstore.DeviceTables and sqlstore.SerialTables.
func (t tables) DeviceModel(ctx context.Context, orgID, deviceID string) (string, error) {
	return t.db.deviceModel(ctx, orgID, deviceID)
}

// deviceModel returns the model of the organization's device, or ENOTFOUND.
func (db *DB) deviceModel(ctx context.Context, orgID, deviceID string) (string, error) {
	st, err := db.readStmt(ctx, deviceModelSQL)
	if err != nil {
		return "", err
	}
	var model string
	err = st.QueryRowContext(ctx, deviceID, orgID).Scan(&model)
	if errors.Is(err, sql.ErrNoRows) {
		return "", deviceNotFound(deviceID)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: device: %w", err)
	}
	return model, nil
}

var deviceNotFound = sqlstore.DeviceNotFound

// AddDevice registers a device in PROVISIONING state with a fresh device
// token, of which only the SHA-256 sum is stored, and its serial state row.
// It returns the device and the token (shown once). An unknown model is
// EINVALID naming the catalog's models; a serial number already used in the
// organization is ECONFLICT.
func (db *DB) AddDevice(ctx context.Context, nd NewDevice) (resource.DeviceDetail, string, error) {
	d, err := sqlstore.PrepareDevice(nd, db.Now())
	if err != nil {
		return resource.DeviceDetail{}, "", err
	}
	if _, err := db.Org(ctx, d.OrgID); err != nil {
		return resource.DeviceDetail{}, "", err
	}
	err = db.WriteTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices WHERE org_id = ? AND serial_number = ?`, d.OrgID, d.Detail.SerialNumber).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return sqlstore.ErrSerialTaken(d.Detail.SerialNumber)
		}
		if _, err := tx.ExecContext(ctx, insertDeviceSQL, d.Args()...); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO serial_state (device_id) VALUES (?)`, d.Detail.ID)
		return err
	})
	if err != nil {
		return resource.DeviceDetail{}, "", wrapErr("add device", err)
	}
	return d.Detail, d.Token, nil
}

const insertDeviceSQL = sqlstore.InsertDeviceSQL

// RevokeDevice revokes the device's token: AuthDevice refuses it from
// then on. Idempotent (the first revocation time is kept, and returned);
// ENOTFOUND for an unknown id.
func (db *DB) RevokeDevice(ctx context.Context, id string) (time.Time, error) {
	var at sql.NullInt64
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE devices SET token_revoked_at = ? WHERE id = ? AND token_revoked_at IS NULL`, db.NowMs(), id); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT token_revoked_at FROM devices WHERE id = ?`, id).Scan(&at)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, deviceNotFound(id)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: revoke device: %w", err)
	}
	return MsTime(at), nil
}

// NewDevice is what AddDevice needs.
type NewDevice = cloud.NewDevice
