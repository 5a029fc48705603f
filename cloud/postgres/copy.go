package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Source is a store whose rows Copy moves here (cloud/sqlite's Export):
// tables with the same names and columns as this store's, times in Unix
// milliseconds, booleans as 0 and 1.
type Source interface {
	Tables(ctx context.Context) ([]string, error)
	// Range is the smallest and largest value of an integer column (ok
	// false for an empty table).
	Range(ctx context.Context, table, column string) (lo, hi int64, ok bool, err error)
	// Rows returns a table's column names and rows.
	Rows(ctx context.Context, table string) ([]string, Rows, error)
}

// Rows iterates over a source table's rows.
type Rows interface {
	Next() bool
	Values() ([]any, error)
	Err() error
	Close() error
}

// ErrNotEmpty is returned by Copy for a database that holds data already.
var ErrNotEmpty = errors.New("the PostgreSQL database is not empty")

// CopyResult is how many rows Copy moved, by table.
type CopyResult map[string]int64

// Copy moves every row of src into db, which must hold no data (else
// ErrNotEmpty, naming the table; nothing is written), in one transaction:
// a failure leaves db as it was. Tables are copied parents first (by
// their foreign keys) with COPY; the partitions the metrics and events
// need are made in the same transaction, and the outbox's, the point
// series' and the point head's sequences are set past the copied rows. A table of src that db
// lacks is an error (a newer source); a column db has and src lacks gets
// its default.
func (db *DB) Copy(ctx context.Context, src Source) (CopyResult, error) {
	tables, err := src.Tables(ctx)
	if err != nil {
		return nil, err
	}
	order, err := db.tableOrder(ctx)
	if err != nil {
		return nil, err
	}
	rank := map[string]int{}
	for i, t := range order {
		rank[t] = i
	}
	for _, t := range tables {
		if _, ok := rank[t]; !ok {
			return nil, fmt.Errorf("postgres: copy: table %s of the source has no counterpart here (is the relay older than the source?)", t)
		}
	}
	sort.Slice(tables, func(i, j int) bool { return rank[tables[i]] < rank[tables[j]] })
	out := CopyResult{}
	err = db.writeTx(ctx, func(tx pgx.Tx) error {
		// Empty means no row in any table the relay writes: the schema
		// alone (a database just migrated) is empty.
		for _, t := range order {
			if t == "leases" {
				continue
			}
			var any bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{t}.Sanitize()+`)`).Scan(&any); err != nil {
				return err
			}
			if any {
				return fmt.Errorf("%w: table %s holds rows (store copy fills only an empty database)", ErrNotEmpty, t)
			}
		}
		for _, t := range tables {
			n, err := db.copyTable(ctx, tx, src, t)
			if err != nil {
				return fmt.Errorf("postgres: copy %s: %w", t, err)
			}
			out[t] = n
		}
		// The sequences move past the copied rows' numbers: the outbox's
		// the point series' and the point head's (their ids are copied as
		// they are).
		for _, q := range []string{
			`SELECT setval(pg_get_serial_sequence('webhook_deliveries', 'seq'), COALESCE((SELECT MAX(seq) FROM webhook_deliveries), 0) + 1, false)`,
			`SELECT setval(pg_get_serial_sequence('point_series', 'id'), COALESCE((SELECT MAX(id) FROM point_series), 0) + 1, false)`,
			`SELECT setval(pg_get_serial_sequence('point_head', 'id'), COALESCE((SELECT MAX(id) FROM point_head), 0) + 1, false)`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	db.forgetPartitions("metrics")
	db.forgetPartitions("events")
	return out, nil
}

// copyTable copies one table with COPY, converting each value to its
// column's type here.
func (db *DB) copyTable(ctx context.Context, tx pgx.Tx, src Source, table string) (int64, error) {
	if col, ok := timeColumn[table]; ok {
		lo, hi, ok, err := src.Range(ctx, table, col)
		if err != nil {
			return 0, err
		}
		if ok {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockPartitions); err != nil {
				return 0, err
			}
			for d := dayOf(lo); d <= dayOf(hi); d += dayMs {
				name := partitionName(table, d)
				if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM (%d) TO (%d)`, name, table, d, d+dayMs)); err != nil {
					return 0, err
				}
			}
		}
	}
	types, err := columnTypes(ctx, tx, table)
	if err != nil {
		return 0, err
	}
	cols, rows, err := src.Rows(ctx, table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	conv := make([]func(any) (any, error), len(cols))
	for i, c := range cols {
		typ, ok := types[c]
		if !ok {
			return 0, fmt.Errorf("column %s of the source has no counterpart here", c)
		}
		conv[i] = converter(typ)
	}
	return tx.CopyFrom(ctx, pgx.Identifier{table}, cols, &convertRows{rows: rows, conv: conv})
}

// columnTypes returns the data type of each column of table.
func columnTypes(ctx context.Context, tx pgx.Tx, table string) (map[string]string, error) {
	rows, err := tx.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`, table)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return nil, err
		}
		out[c] = t
	}
	rows.Close()
	return out, rows.Err()
}

// converter turns a source value into one for a column of type typ.
func converter(typ string) func(any) (any, error) {
	switch typ {
	case "boolean":
		return func(v any) (any, error) {
			switch x := v.(type) {
			case nil, bool:
				return x, nil
			case int64:
				return x != 0, nil
			}
			return nil, fmt.Errorf("%T is not a boolean", v)
		}
	case "text":
		return func(v any) (any, error) {
			if b, ok := v.([]byte); ok {
				return string(b), nil
			}
			return v, nil
		}
	case "bytea":
		return func(v any) (any, error) {
			if s, ok := v.(string); ok {
				return []byte(s), nil
			}
			return v, nil
		}
	case "double precision":
		return func(v any) (any, error) {
			if i, ok := v.(int64); ok {
				return float64(i), nil
			}
			return v, nil
		}
	}
	return func(v any) (any, error) { return v, nil }
}

// convertRows is a pgx.CopyFromSource over converted source rows.
type convertRows struct {
	rows Rows
	conv []func(any) (any, error)
}

func (c *convertRows) Next() bool { return c.rows.Next() }
func (c *convertRows) Err() error { return c.rows.Err() }

func (c *convertRows) Values() ([]any, error) {
	vals, err := c.rows.Values()
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		if vals[i], err = c.conv[i](v); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// tableOrder returns the store's tables (not partitions, not the
// migrations' bookkeeping), each after the tables its foreign keys name.
func (db *DB) tableOrder(ctx context.Context) ([]string, error) {
	rows, err := db.Pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname <> 'schema_migrations' ORDER BY c.relname`)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	rows, err = db.Pool.Query(ctx, `SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c
		JOIN pg_namespace n ON n.oid = c.connamespace WHERE c.contype = 'f' AND n.nspname = current_schema()`)
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	for rows.Next() {
		var child, parent string
		if err := rows.Scan(&child, &parent); err != nil {
			rows.Close()
			return nil, err
		}
		child, parent = strings.Trim(child, `"`), strings.Trim(parent, `"`)
		if child != parent {
			deps[child] = append(deps[child], parent)
		}
	}
	rows.Close()
	var order []string
	done := map[string]bool{}
	var visit func(t string, depth int) error
	visit = func(t string, depth int) error {
		if done[t] {
			return nil
		}
		if depth > len(tables) {
			return fmt.Errorf("postgres: copy: foreign keys form a cycle at %s", t)
		}
		for _, p := range deps[t] {
			if err := visit(p, depth+1); err != nil {
				return err
			}
		}
		done[t] = true
		order = append(order, t)
		return nil
	}
	for _, t := range tables {
		if err := visit(t, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}
