package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

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

func (c sqlConn) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (c sqlConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// txConn is sqlConn on a write transaction of Tx, which runs the
// statements prepared once on the writer (DB.txStmts) as they are and
// prepares any other in the transaction, as database/sql does.
type txConn struct {
	sqlConn
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (c txConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, ok := c.stmts[query]
	if !ok {
		return c.sqlConn.Exec(ctx, query, args...)
	}
	res, err := c.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// prepareAll prepares each query on db (before any transaction holds its
// one connection).
func prepareAll(ctx context.Context, db *sql.DB, queries []string) (map[string]*sql.Stmt, error) {
	out := make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("sqlite: prepare %q: %w", q, err)
		}
		out[q] = st
	}
	return out, nil
}

// dialect is SQLite's: the shared statements run as they are written, and
// the one writer serializes every transaction.
var dialect = sqlstore.Dialect{Name: "sqlite", IsUnique: isUnique}

// isUnique reports a unique-constraint violation.
func isUnique(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
}

// statement is a prepared statement (*sql.Stmt) or one run unprepared.
type statement interface {
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
	QueryContext(ctx context.Context, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
}

// prepared runs the shared code's statements (a sqlstore.Querier) as the
// function returns them, prepared: readerStmt on the readers, writerConn's
// in the agent writer's transaction.
type prepared func(ctx context.Context, query string) (statement, error)

func (p prepared) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	st, err := p(ctx, query)
	if err != nil {
		return sqlstore.ErrRow(err)
	}
	return st.QueryRowContext(ctx, args...)
}

func (p prepared) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	st, err := p(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (p prepared) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := p(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// maxStmts bounds the statements readerStmt keeps prepared; one beyond
// them runs unprepared.
const maxStmts = 1024

// readerStmt returns query prepared once on the readers and kept
// (readStmt), up to maxStmts of them.
func (db *DB) readerStmt(ctx context.Context, query string) (statement, error) {
	if db.nstmts.Load() >= maxStmts {
		if _, ok := db.stmts.Load(query); !ok {
			return unprepared{db.R, query}, nil
		}
	}
	return db.readStmt(ctx, query)
}

// unprepared is a statement run on a pool without preparing it.
type unprepared struct {
	db    *sql.DB
	query string
}

func (u unprepared) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return u.db.QueryRowContext(ctx, u.query, args...)
}

func (u unprepared) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	return u.db.QueryContext(ctx, u.query, args...)
}

func (u unprepared) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return u.db.ExecContext(ctx, u.query, args...)
}

var _ cloud.KeyUseRecorder = (*DB)(nil)

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

// Stores returns db with the stores of the relay's parts made from it.
func (db *DB) Stores() cloud.Stores {
	return cloud.Stores{
		Store: db,
		Now:   func() time.Time { return db.Now() },
		Panel: NewPanelStore(db),
		NewAgentStore: func(log *slog.Logger) (cloud.AgentStoreCloser, error) {
			a, err := NewAgentStore(db, log)
			if err != nil {
				return nil, err
			}
			return a, nil
		},
		Engine:       NewAlertEngineStore(db),
		Outbox:       NewWebhookStore(db),
		PointHistory: db,
		Commands:     &sqlstore.CommandStore{Tables: &db.Store},
		StaleConfigs: func(ctx context.Context) ([]string, error) { return db.StaleConfigs(ctx, "") },
	}
}
