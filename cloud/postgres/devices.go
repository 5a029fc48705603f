package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// DeviceService implements cloud.DeviceService on the store.
type DeviceService struct{ db *DB }

var _ cloud.DeviceService = (*DeviceService)(nil)

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

// ListDevices lists the organization's devices oldest first (created_at,
// then id), keyset-paginated; the cursor must be a device of the
// organization, and the status filter is not applied to it.
func (s *DeviceService) ListDevices(ctx context.Context, orgID string, f cloud.DeviceFilter) (resource.List[resource.Device], error) {
	return listPage(ctx, s.db, sqlstore.DeviceList(orgID, f))
}

// Device returns the organization's device id, or ENOTFOUND.
func (s *DeviceService) Device(ctx context.Context, orgID, id string) (resource.DeviceDetail, error) {
	var dd resource.DeviceDetail
	var err error
	dd.Device, err = sqlstore.ScanDevice(s.db.Pool.QueryRow(ctx, `SELECT `+sqlstore.DeviceColumns+`, notes, agent_device_name, agent_device_location, agent_timezone
		FROM devices WHERE id = $1 AND org_id = $2`, id, orgID), &dd.Notes, &dd.AgentDeviceName, &dd.AgentDeviceLocation, &dd.AgentTimezone)
	if errors.Is(err, pgx.ErrNoRows) {
		return resource.DeviceDetail{}, deviceNotFound(id)
	}
	if err != nil {
		return resource.DeviceDetail{}, storeError("postgres: device: %w", err)
	}
	return dd, nil
}

const metricsSQL = `SELECT ` + sqlstore.SampleColumns + ` FROM metrics
	WHERE device_id = $1 AND captured_at >= $2 AND captured_at <= $3 ORDER BY captured_at DESC LIMIT $4`

// Metrics returns the device's samples in [q.From, q.To], ascending; the
// newest q.Limit when more fall in the window.
func (s *DeviceService) Metrics(ctx context.Context, orgID, deviceID string, q cloud.MetricsQuery) (resource.MetricsResponse, error) {
	out := resource.MetricsResponse{Data: []resource.MetricSample{}}
	if q.From.After(q.To) {
		return out, cloud.Errorf(cloud.EINVALID, "from must not be after to")
	}
	if err := s.db.checkDevice(ctx, orgID, deviceID); err != nil {
		return out, err
	}
	limit := cloud.ListLimit(q.Limit, 200, 1000)
	data, err := query(ctx, s.db, "metrics", sqlstore.ScanSample, metricsSQL, deviceID, q.From.UnixMilli(), q.To.UnixMilli(), limit+1)
	if err != nil {
		return out, err
	}
	return sqlstore.MetricsResponse(q, limit, data), nil
}

// Events lists the device's events newest first (created_at, then id),
// keyset-paginated; the cursor must be an event of this device.
func (s *DeviceService) Events(ctx context.Context, orgID, deviceID string, f cloud.EventFilter) (resource.List[resource.Event], error) {
	out := resource.List[resource.Event]{Data: []resource.Event{}}
	if err := s.db.checkDevice(ctx, orgID, deviceID); err != nil {
		return out, err
	}
	return listPage(ctx, s.db, sqlstore.EventList(deviceID, f))
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
	q, args, err := k.SQL(sqlstore.Dollar)
	if err != nil {
		return k.Page(nil, err, nil)
	}
	list, err := query(ctx, db, k.What, k.Scan, q, args...)
	return k.Page(list, err, func() error { return db.checkCursor(ctx, k.CursorSQL(sqlstore.Dollar), k.Cursor, k.Scope) })
}

// checkDevice returns ENOTFOUND unless the device exists in the organization.
func (db *DB) checkDevice(ctx context.Context, orgID, deviceID string) error {
	_, err := db.deviceModel(ctx, orgID, deviceID)
	return err
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

func deviceNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "device %q not found", id)
}

// AddDevice registers a device in PROVISIONING state with a fresh token.
func (db *DB) AddDevice(ctx context.Context, nd cloud.NewDevice) (resource.DeviceDetail, string, error) {
	nd, err := nd.Validate()
	if err != nil {
		return resource.DeviceDetail{}, "", err
	}
	if _, err := db.Org(ctx, nd.OrgID); err != nil {
		return resource.DeviceDetail{}, "", err
	}
	token, sum, err := apikey.NewDeviceToken()
	if err != nil {
		return resource.DeviceDetail{}, "", err
	}
	now := db.Now().UTC().Truncate(time.Millisecond)
	d := resource.DeviceDetail{
		Device: resource.Device{ID: ids.New(), Name: nd.Name, SerialNumber: nd.SerialNumber, Status: resource.StatusProvisioning,
			Model: nd.Model, Location: nd.Location, CreatedAt: resource.T(now)},
		Notes: nd.Notes,
	}
	err = db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO devices (id, org_id, name, serial_number, model, location, notes, status, token_hash, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			d.ID, nd.OrgID, d.Name, d.SerialNumber, d.Model, d.Location, nd.Notes, string(d.Status), sum, now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES ($1)`, d.ID)
		return err
	})
	if isUnique(err) {
		return resource.DeviceDetail{}, "", cloud.Errorf(cloud.ECONFLICT, "a device with serial number %q already exists in the organization", nd.SerialNumber)
	}
	if err != nil {
		return resource.DeviceDetail{}, "", storeError("postgres: add device: %w", err)
	}
	return d, token, nil
}

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
