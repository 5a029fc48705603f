package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// DefaultRetention is how long metrics and events are kept by default.
const DefaultRetention = cloud.DefaultRetention

// retentionBatch bounds the rows one delete statement removes, so that the
// writer is never held for long.
const retentionBatch = 5000

// SweepRetention deletes metrics and events older than now minus keep, in
// small batches. It returns how many rows of each it deleted.
func (db *DB) SweepRetention(ctx context.Context, keep time.Duration) (metrics, events int64, err error) {
	if keep <= 0 {
		return 0, 0, fmt.Errorf("sqlite: retention must be positive")
	}
	cut := db.Now().Add(-keep).UnixMilli()
	// metrics has no index on captured_at alone: walk it per device through
	// its primary key (device_id, captured_at).
	devices, err := sqlstore.Collect(ctx, sqlConn{db.R}, sqlstore.ScanString, `SELECT id FROM devices`)
	if err != nil {
		return 0, 0, wrapErr("retention", err)
	}
	for _, id := range devices {
		n, err := db.deleteBatches(ctx, `DELETE FROM metrics WHERE device_id = ?1 AND captured_at < ?2 AND captured_at IN
			(SELECT captured_at FROM metrics WHERE device_id = ?1 AND captured_at < ?2 LIMIT `+fmt.Sprint(retentionBatch)+`)`, cut, id)
		metrics += n
		if err != nil {
			return metrics, 0, err
		}
	}
	events, err = db.deleteBatches(ctx, `DELETE FROM events WHERE rowid IN
		(SELECT rowid FROM events WHERE created_at < ?2 LIMIT `+fmt.Sprint(retentionBatch)+`)`, cut, "")
	return metrics, events, err
}

// deleteBatches runs query (arguments: device, cut), which deletes up to
// retentionBatch rows, until it deletes fewer (sqlstore.DeleteBatches).
func (db *DB) deleteBatches(ctx context.Context, query string, cut int64, device string) (int64, error) {
	total, err := sqlstore.DeleteBatches(retentionBatch, func() (int64, error) {
		res, err := db.W.ExecContext(ctx, query, device, cut)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
	if err != nil {
		return total, fmt.Errorf("sqlite: retention: %w", err)
	}
	return total, nil
}
