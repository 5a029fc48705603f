package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// Export is a read-only snapshot of the whole database, table by table,
// for `fleet-relay store copy`: every read sees the same committed state.
// Close it when done.
type Export struct {
	tx *sql.Tx
}

// Export opens a snapshot of the database.
func (db *DB) Export(ctx context.Context) (*Export, error) {
	tx, err := db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: export: %w", err)
	}
	// The snapshot starts with the first read.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("sqlite: export: %w", err)
	}
	return &Export{tx: tx}, nil
}

// Close ends the snapshot.
func (e *Export) Close() error { return e.tx.Rollback() }

// Tables returns the names of the store's tables (SQLite's own and the
// migrations' bookkeeping left out).
func (e *Export) Tables(ctx context.Context) ([]string, error) {
	out, err := sqlstore.Collect(ctx, sqlConn{e.tx}, sqlstore.ScanString, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations' ORDER BY name`)
	return out, wrapErr("export", err)
}

// Range returns the smallest and largest value of an integer column of
// table (ok false when the table is empty).
func (e *Export) Range(ctx context.Context, table, column string) (lo, hi int64, ok bool, err error) {
	var min, max sql.NullInt64
	if err := e.tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT MIN(%s), MAX(%s) FROM %s`, quote(column), quote(column), quote(table))).Scan(&min, &max); err != nil {
		return 0, 0, false, fmt.Errorf("sqlite: export %s: %w", table, err)
	}
	return min.Int64, max.Int64, min.Valid, nil
}

// Rows returns every row of table, with its column names.
func (e *Export) Rows(ctx context.Context, table string) (cols []string, rows *TableRows, err error) {
	r, err := e.tx.QueryContext(ctx, `SELECT * FROM `+quote(table))
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: export %s: %w", table, err)
	}
	cols, err = r.Columns()
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("sqlite: export %s: %w", table, err)
	}
	return cols, &TableRows{rows: r, vals: make([]any, len(cols))}, nil
}

// TableRows iterates over a table's rows: Next, then Values; Err after
// the last; Close when done.
type TableRows struct {
	rows *sql.Rows
	vals []any
}

// Next moves to the next row.
func (t *TableRows) Next() bool { return t.rows.Next() }

// Values returns the row's values: nil, int64, float64, string or []byte.
func (t *TableRows) Values() ([]any, error) {
	ptrs := make([]any, len(t.vals))
	for i := range t.vals {
		ptrs[i] = &t.vals[i]
	}
	if err := t.rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]any, len(t.vals))
	copy(out, t.vals)
	return out, nil
}

// Err is the error that ended the iteration, if any.
func (t *TableRows) Err() error { return t.rows.Err() }

// Close closes the rows.
func (t *TableRows) Close() error { return t.rows.Close() }

// quote quotes an identifier.
func quote(name string) string { return `"` + name + `"` }
