package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SweepRetention deletes metrics and events older than now minus keep:
// each partition whose whole day is older is counted and dropped (one
// statement, no row-by-row delete, no bloat), and the rows of the day at the
// boundary that are older are deleted. It also creates the partitions of
// the days ahead. It returns how many rows of each it removed.
func (db *DB) SweepRetention(ctx context.Context, keep time.Duration) (metrics, events int64, err error) {
	if keep <= 0 {
		return 0, 0, storeError("postgres: retention must be positive")
	}
	if err := db.ensureAhead(ctx); err != nil {
		return 0, 0, err
	}
	cut := db.Now().Add(-keep).UnixMilli()
	var n [2]int64
	for i, table := range partitioned {
		if n[i], err = db.sweepTable(ctx, table, cut); err != nil {
			return n[0], n[1], err
		}
	}
	return n[0], n[1], nil
}

// timeColumn is each partitioned table's partition key.
var timeColumn = map[string]string{"metrics": "captured_at", "events": "created_at"}

func (db *DB) sweepTable(ctx context.Context, table string, cut int64) (int64, error) {
	days, err := db.partitionsOf(ctx, table)
	if err != nil {
		return 0, storeError("postgres: retention of %s: %w", table, err)
	}
	var total int64
	for _, d := range days {
		if d >= cut {
			break
		}
		name := partitionName(table, d)
		if d+dayMs <= cut {
			// The whole day is older: count it and drop it, under the
			// partition lock (no relay creates it meanwhile).
			err := db.writeTx(ctx, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockPartitions); err != nil {
					return err
				}
				var n int64
				if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM `+name).Scan(&n); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `DROP TABLE `+name); err != nil {
					return err
				}
				total += n
				return nil
			})
			if err != nil {
				return total, storeError("postgres: retention: drop %s: %w", name, err)
			}
			db.partMu.Lock()
			delete(db.parts, name)
			db.partMu.Unlock()
			continue
		}
		tag, err := db.Pool.Exec(ctx, `DELETE FROM `+name+` WHERE `+timeColumn[table]+` < $1`, cut)
		if err != nil {
			return total, storeError("postgres: retention of %s: %w", name, err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}
