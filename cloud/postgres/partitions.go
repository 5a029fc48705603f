package postgres

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// metrics and events are partitioned by day (UTC) on their time column:
// partition <table>_d<YYYYMMDD> holds [day start, next day start) in Unix
// milliseconds. Partitions are created a week ahead at open and by the
// retention sweep, and on demand before a write that needs one (an agent's
// spool may hold old samples, a clock may run ahead), under an advisory
// lock so that relays creating the same partition do not collide.

// partitioned lists the partitioned tables.
var partitioned = []string{"metrics", "events"}

// aheadDays is how many days of partitions exist ahead of today.
const aheadDays = 7

const dayMs = int64(24 * time.Hour / time.Millisecond)

func dayOf(ms int64) int64 {
	d := ms / dayMs * dayMs
	if ms < 0 && ms%dayMs != 0 {
		d -= dayMs
	}
	return d
}

func partitionName(table string, day int64) string {
	return table + "_d" + time.UnixMilli(day).UTC().Format("20060102")
}

var partitionRE = regexp.MustCompile(`^(metrics|events)_d(\d{8})$`)

// partitionDay parses a partition's name.
func partitionDay(name string) (table string, day int64, ok bool) {
	m := partitionRE.FindStringSubmatch(name)
	if m == nil {
		return "", 0, false
	}
	t, err := time.Parse("20060102", m[2])
	if err != nil {
		return "", 0, false
	}
	return m[1], t.UnixMilli(), true
}

// ensureDays makes sure table has a partition for the day of every time
// in ms (Unix milliseconds). Creation is rare (a day ahead, or old data):
// the process's writers wait for it behind partMu.
func (db *DB) ensureDays(ctx context.Context, table string, ms ...int64) error {
	db.partMu.Lock()
	defer db.partMu.Unlock()
	var missing []int64
	seen := map[int64]bool{}
	for _, t := range ms {
		d := dayOf(t)
		if !seen[d] && !db.parts[partitionName(table, d)] {
			missing = append(missing, d)
		}
		seen[d] = true
	}
	if len(missing) == 0 {
		return nil
	}
	if err := db.createPartitions(ctx, table, missing); err != nil {
		return err
	}
	for _, d := range missing {
		db.parts[partitionName(table, d)] = true
	}
	return nil
}

// createPartitions creates the partitions of table for days that do not
// exist, in one transaction under the partition lock.
func (db *DB) createPartitions(ctx context.Context, table string, days []int64) error {
	sort.Slice(days, func(i, j int) bool { return days[i] < days[j] })
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockPartitions); err != nil {
			return err
		}
		for _, d := range days {
			name := partitionName(table, d)
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
				return err
			}
			if exists {
				continue
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (%d) TO (%d)`, name, table, d, d+dayMs)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return storeError("postgres: create partitions of %s: %w", table, err)
	}
	return nil
}

// forgetPartitions drops what the process believes about table's
// partitions (after a write found one missing: another relay's retention
// dropped it).
func (db *DB) forgetPartitions(table string) {
	db.partMu.Lock()
	for name := range db.parts {
		if t, _, ok := partitionDay(name); ok && t == table {
			delete(db.parts, name)
		}
	}
	db.partMu.Unlock()
}

// ensureAhead creates the partitions of yesterday, today and the next
// aheadDays days.
func (db *DB) ensureAhead(ctx context.Context) error {
	today := dayOf(db.NowMs())
	var days []int64
	for d := -1; d <= aheadDays; d++ {
		days = append(days, today+int64(d)*dayMs)
	}
	for _, t := range partitioned {
		if err := db.ensureDays(ctx, t, days...); err != nil {
			return err
		}
	}
	return nil
}

// withPartitions runs write after making sure table has the partitions of
// the times in ms, and once more after a write that found one missing
// (another relay's retention may have dropped a partition this process
// thought was there).
func (db *DB) withPartitions(ctx context.Context, table string, ms []int64, write func() error) error {
	if err := db.ensureDays(ctx, table, ms...); err != nil {
		return err
	}
	err := write()
	if err != nil && isNoPartition(err) {
		db.forgetPartitions(table)
		if err := db.ensureDays(ctx, table, ms...); err != nil {
			return err
		}
		err = write()
	}
	return err
}

// partitionsOf lists table's partitions by day, oldest first.
func (db *DB) partitionsOf(ctx context.Context, table string) ([]int64, error) {
	rows, err := db.Pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var days []int64
	for _, n := range names {
		if t, d, ok := partitionDay(n); ok && t == table {
			days = append(days, d)
		}
	}
	sort.Slice(days, func(i, j int) bool { return days[i] < days[j] })
	return days, nil
}
