package sqlstore

import "context"

// Querier runs the shared code's statements on a store's pool or
// transaction: they are written with ? placeholders (the PostgreSQL store
// numbers them), and a missing row scans as sql.ErrNoRows in either store.
type Querier interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query returns query's rows; the caller closes them.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// ErrRow is a row whose Scan returns err: a Querier's QueryRow when the
// statement could not be prepared.
func ErrRow(err error) Row { return errRow{err} }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Collect reads every row of query with scan, into a slice that is empty
// rather than nil.
func Collect[T any](ctx context.Context, q Querier, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Each calls each for every row of query, stopping at its first error.
func Each(ctx context.Context, q Querier, query string, args []any, each func(Row) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return EachRow(rows, each)
}

// Rows are a result's rows, as *sql.Rows is (a PostgreSQL store wraps
// pgx.Rows, whose Close returns nothing).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// EachRow calls each for every row of rows, stopping at its first error,
// and returns that or the rows' error (the caller closes rows).
func EachRow(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}, each func(Row) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// DeleteBatches runs del, which deletes up to limit rows (in a short
// transaction, so that writers are never held for long), again until it
// deletes fewer, and returns how many rows it deleted in all.
func DeleteBatches(limit int64, del func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := del()
		if err != nil {
			return total, err
		}
		total += n
		if n < limit {
			return total, nil
		}
	}
}
