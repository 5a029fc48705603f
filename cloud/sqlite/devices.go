package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The point reads of the request path (explain_test.go checks that each,
// and each list query, is served by an index).
const (
	deviceByTokenSQL = `SELECT id, org_id, model FROM devices WHERE token_hash = ? AND token_revoked_at IS NULL`
	deviceModelSQL   = sqlstore.DeviceModelSQL
)

const metricsSQL = sqlstore.SamplesSQL

var deviceNotFound = sqlstore.DeviceNotFound

// SetDeviceStatus sets the device's status and, when lastSeen is not zero,
// its last-seen time. It returns the previous status; ENOTFOUND for an
// unknown id.
func (db *DB) SetDeviceStatus(ctx context.Context, id string, status resource.DeviceStatus, lastSeen time.Time) (resource.DeviceStatus, error) {
	if !status.Valid() {
		return "", cloud.Errorf(cloud.EINVALID, "unknown status %q", status)
	}
	var prev string
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT status FROM devices WHERE id = ?`, id).Scan(&prev); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE devices SET status = ?, last_seen = COALESCE(?, last_seen) WHERE id = ?`, string(status), TimeMs(lastSeen), id)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return "", deviceNotFound(id)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: set device status: %w", err)
	}
	return resource.DeviceStatus(prev), nil
}

// InsertMetrics stores samples of the device; a sample whose capturedAt is
// already stored is ignored. It returns how many were new.
func (db *DB) InsertMetrics(ctx context.Context, deviceID string, samples []resource.MetricSample) (int, error) {
	for _, m := range samples {
		for _, v := range [...]float64{m.CPUPct, m.MemPct, m.DiskUsedPct, m.TempCPU, m.LoadAvg1} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, cloud.Errorf(cloud.EINVALID, "metric sample at %s holds a value that is not a finite number", resource.FormatTime(m.CapturedAt.Time))
			}
		}
	}
	var n int64
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = execEach(ctx, tx, `INSERT OR IGNORE INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			len(samples), func(i int) []any {
				m := samples[i]
				return []any{deviceID, m.CapturedAt.UnixMilli(), m.CPUPct, m.MemPct, m.DiskUsedPct, m.TempCPU, m.LoadAvg1}
			})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: insert metrics: %w", err)
	}
	return int(n), nil
}

// InsertEvents stores events of the device (in the device's organization);
// an event whose id is already stored is ignored. Events without an id get
// a fresh one, without a time the clock's, without data an empty object;
// the slice is updated in place. It returns how many were new.
func (db *DB) InsertEvents(ctx context.Context, deviceID string, events []resource.Event) (int, error) {
	var n int64
	now := db.Now()
	for i := range events {
		e := &events[i]
		if e.ID == "" {
			e.ID = ids.New()
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = resource.T(now)
		}
		if len(e.Data) == 0 || string(e.Data) == "null" {
			e.Data = json.RawMessage(`{}`)
		}
		if e.Severity == "" {
			e.Severity = resource.SeverityInfo
		}
	}
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		var orgID string
		if err := tx.QueryRowContext(ctx, `SELECT org_id FROM devices WHERE id = ?`, deviceID).Scan(&orgID); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return deviceNotFound(deviceID)
			}
			return err
		}
		var err error
		n, err = execEach(ctx, tx, `INSERT OR IGNORE INTO events (id, org_id, device_id, type, severity, message, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			len(events), func(i int) []any {
				e := events[i]
				return []any{e.ID, orgID, deviceID, e.Type, string(e.Severity), e.Message, string(e.Data), e.CreatedAt.UnixMilli()}
			})
		return err
	})
	if err != nil {
		if cloud.ErrorCode(err) == cloud.ENOTFOUND {
			return 0, err
		}
		return 0, fmt.Errorf("sqlite: insert events: %w", err)
	}
	return int(n), nil
}

// execEach prepares query in tx, runs it with the arguments of each of n
// items, and returns how many rows they changed.
func execEach(ctx context.Context, tx *sql.Tx, query string, n int, args func(i int) []any) (int64, error) {
	st, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var changed int64
	for i := 0; i < n; i++ {
		res, err := st.ExecContext(ctx, args(i)...)
		if err != nil {
			return changed, err
		}
		k, _ := res.RowsAffected()
		changed += k
	}
	return changed, nil
}

// NewDevice is what AddDevice needs.
type NewDevice = cloud.NewDevice
