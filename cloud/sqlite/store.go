package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

// tables are db's tables in SQLite's dialect, under the services of
// cloud/internal/sqlstore.
type tables struct{ db *DB }

var _ sqlstore.Tables = tables{}

// Now implements sqlstore.Tables: db's clock.
func (t tables) Now() time.Time { return t.db.Now() }

// sqlConn runs the statements of cloud/internal/sqlstore (a Querier) on a
// pool (db.R) or a transaction.
type sqlConn struct {
	q interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
}

func (c sqlConn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return c.q.QueryRowContext(ctx, query, args...)
}

func (c sqlConn) Query(ctx context.Context, query string, args []any, each func(sqlstore.Row) error) error {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.EachRow(rows, each)
}

func (c sqlConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Keys returns db, whose KeyByID finds API keys.
func (db *DB) Keys() cloud.KeyService { return db }

// Versioner returns db: DataVersion follows the WAL index (version.go,
// cloud/sqlite/walindex).
func (db *DB) Versioner() cloud.Versioner { return db }

// Ready reports whether the database file answers a read.
func (db *DB) Ready(ctx context.Context) error {
	var one int
	return db.R.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}
