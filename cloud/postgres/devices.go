package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
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
