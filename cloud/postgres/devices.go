package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// query runs q and collects its rows with scan.
func query[T any](ctx context.Context, db *DB, what string, scan func(sqlstore.Row) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.Pool.Query(ctx, q, args...)
	if err != nil {
		return nil, storeError("postgres: %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, storeError("postgres: %s: %w", what, err)
	}
	return out, nil
}

// DeviceDetail implements sqlstore.DeviceTables.
func (t tables) DeviceDetail(ctx context.Context, orgID, id string) (resource.DeviceDetail, error) {
	var dd resource.DeviceDetail
	var err error
	dd.Device, err = sqlstore.ScanDevice(t.db.Pool.QueryRow(ctx, `SELECT `+sqlstore.DeviceColumns+`, notes, agent_device_name, agent_device_location, agent_timezone
		FROM devices WHERE id = $1 AND org_id = $2`, id, orgID), &dd.Notes, &dd.AgentDeviceName, &dd.AgentDeviceLocation, &dd.AgentTimezone)
	if errors.Is(err, pgx.ErrNoRows) {
		return resource.DeviceDetail{}, deviceNotFound(id)
	}
	if err != nil {
		return resource.DeviceDetail{}, storeError("postgres: device: %w", err)
	}
	return dd, nil
}

var metricsSQL = numbered(sqlstore.SamplesSQL)

// NewestSamples implements sqlstore.DeviceTables.
func (t tables) NewestSamples(ctx context.Context, deviceID string, from, to time.Time, n int) ([]resource.MetricSample, error) {
	return query(ctx, t.db, "metrics", sqlstore.ScanSample, metricsSQL, deviceID, from.UnixMilli(), to.UnixMilli(), n)
}

// DevicePage implements sqlstore.DeviceTables.
func (t tables) DevicePage(ctx context.Context, k sqlstore.Keyset[resource.Device]) (resource.List[resource.Device], error) {
	return listPage(ctx, t.db, k)
}

// EventPage implements sqlstore.DeviceTables.
func (t tables) EventPage(ctx context.Context, k sqlstore.Keyset[resource.Event]) (resource.List[resource.Event], error) {
	return listPage(ctx, t.db, k)
}

// checkCursor returns ECURSOR unless query (cursor, scope) finds a row.
func (db *DB) checkCursor(ctx context.Context, query, cursor, scope string) error {
	var at int64
	err := db.Pool.QueryRow(ctx, query+` LIMIT 1`, cursor, scope).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return cloud.ErrCursor()
	}
	if err != nil {
		return storeError("postgres: cursor: %w", err)
	}
	return nil
}

// listPage reads the page of k.
func listPage[T any](ctx context.Context, db *DB, k sqlstore.Keyset[T]) (resource.List[T], error) {
	q, args, err := k.SQL()
	if err != nil {
		return k.Page(nil, err, nil)
	}
	list, err := query(ctx, db, k.What, k.Scan, numbered(q), args...)
	return k.Page(list, err, func() error { return db.checkCursor(ctx, numbered(k.CursorSQL()), k.Cursor, k.Scope) })
}

// DeviceModel implements sqlstore.DeviceTables and sqlstore.SerialTables.
func (t tables) DeviceModel(ctx context.Context, orgID, deviceID string) (string, error) {
	return t.db.deviceModel(ctx, orgID, deviceID)
}

// deviceModel returns the model of the organization's device, or ENOTFOUND.
func (db *DB) deviceModel(ctx context.Context, orgID, deviceID string) (string, error) {
	var model string
	err := db.Pool.QueryRow(ctx, `SELECT model FROM devices WHERE id = $1 AND org_id = $2`, deviceID, orgID).Scan(&model)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", deviceNotFound(deviceID)
	}
	if err != nil {
		return "", storeError("postgres: device: %w", err)
	}
	return model, nil
}

var deviceNotFound = sqlstore.DeviceNotFound

// AddDevice registers a device in PROVISIONING state with a fresh token.
func (db *DB) AddDevice(ctx context.Context, nd cloud.NewDevice) (resource.DeviceDetail, string, error) {
	d, err := sqlstore.PrepareDevice(nd, db.Now())
	if err != nil {
		return resource.DeviceDetail{}, "", err
	}
	if _, err := db.Org(ctx, d.OrgID); err != nil {
		return resource.DeviceDetail{}, "", err
	}
	err = db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertDeviceSQL, d.Args()...); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES ($1)`, d.Detail.ID)
		return err
	})
	if isUnique(err) {
		return resource.DeviceDetail{}, "", sqlstore.ErrSerialTaken(d.Detail.SerialNumber)
	}
	if err != nil {
		return resource.DeviceDetail{}, "", storeError("postgres: add device: %w", err)
	}
	return d.Detail, d.Token, nil
}

var insertDeviceSQL = numbered(sqlstore.InsertDeviceSQL)

// RevokeDevice revokes the device's token (the first time is kept).
func (db *DB) RevokeDevice(ctx context.Context, id string) (time.Time, error) {
	var at *int64
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `UPDATE devices SET token_revoked_at = COALESCE(token_revoked_at, $1) WHERE id = $2 RETURNING token_revoked_at`, db.NowMs(), id).Scan(&at); err != nil {
			return err
		}
		return notify(ctx, tx, channelRevoked, id) // every relay closes the device's connection at once
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, deviceNotFound(id)
	}
	if err != nil {
		return time.Time{}, storeError("postgres: revoke device: %w", err)
	}
	return msTime(at), nil
}
