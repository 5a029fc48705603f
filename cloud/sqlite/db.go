// Package sqlite is the relay's store on SQLite (mattn/go-sqlite3): WAL
// journal, one writer connection with immediate transactions, a separate
// pool of readers, and embedded SQL migrations applied in order at open.
// Other processes (the admin CLI) may use the same file while a relay runs.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// DB is an open store.
type DB struct {
	// W is the single writer connection; every write goes through it.
	W *sql.DB
	// R is the pool of readers.
	R *sql.DB
	// Now is the clock.
	Now cloud.Now

	path  string
	stmts sync.Map // query text -> *sql.Stmt on R (see readStmt)
	// txStmts are sqlstore.TxStatements prepared once on the writer, which
	// Tx's transactions run through tx.StmtContext (txConn).
	txStmts map[string]*sql.Stmt
	nstmts  atomic.Int64 // how many stmts holds

	ver versionReader // see DataVersion

	ckpt *checkpointer // see checkpoint.go

	// the services of Devices, Serial and Alerts (store.go)
	sqlstore.Services // Devices, Serial, Alerts, Observe
	// the queries written once for both stores, in SQLite's dialect
	sqlstore.Store
}

// Open opens (creating if needed) the database file at path and applies
// pending migrations.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite: empty database path")
	}
	if err := initPageSize(path); err != nil {
		return nil, err
	}
	dsn := func(mode string) string {
		q := url.Values{}
		q.Set("_journal_mode", "WAL")
		q.Set("_busy_timeout", "10000")
		q.Set("_synchronous", "NORMAL")
		q.Set("_foreign_keys", "on")
		q.Set("_txlock", "immediate")
		q.Set("_cache_size", "-16000")
		if mode != "" {
			q.Set("mode", mode)
		}
		return "file:" + path + "?" + q.Encode()
	}
	// The writer never checkpoints on commit (wal_autocheckpoint=0, set by
	// the connect hook on every connection the pool opens); the
	// checkpointer does it on its own connection (checkpoint.go).
	w := sql.OpenDB(hookConnector{dsn: dsn(""), driver: &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf(`PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = %d`, walSizeLimit), nil)
		return err
	}}})
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db := &DB{W: w, Now: time.Now, path: path}
	db.Services = sqlstore.NewServices(&db.Store)
	db.Store = sqlstore.Store{Dialect: dialect, R: prepared(db.readerStmt), W: sqlConn{w}, Clock: func() time.Time { return db.Now() },
		Tx: func(ctx context.Context, fn func(sqlstore.Querier) error) error {
			return db.WriteTx(ctx, func(tx *sql.Tx) error { return fn(txConn{sqlConn{tx}, tx, db.txStmts}) })
		}}
	if err := db.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	var err error
	if db.txStmts, err = prepareAll(ctx, w, sqlstore.TxStatements); err != nil {
		w.Close()
		return nil, err
	}
	r := sql.OpenDB(hookConnector{dsn: dsn("ro"), driver: &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf(`PRAGMA mmap_size = %d`, readerMmapSize), nil)
		return err
	}}})
	n := 2 * runtime.GOMAXPROCS(0)
	if n < 4 {
		n = 4
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxIdleTime(0)
	r.SetConnMaxLifetime(0)
	db.R = r
	v, err := sql.Open("sqlite3", dsn("ro"))
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open version reader: %w", err)
	}
	v.SetMaxOpenConns(1)
	v.SetMaxIdleConns(1)
	v.SetConnMaxIdleTime(0)
	v.SetConnMaxLifetime(0)
	db.ver.db = v
	ck, err := startCheckpointer(ctx, dsn, w, checkpointInterval)
	if err != nil {
		v.Close()
		r.Close()
		w.Close()
		return nil, err
	}
	db.ckpt = ck
	return db, nil
}

// readerMmapSize is how much of the database file each reader maps: pages
// are then read from the shared mapping rather than copied by a read(2)
// each, which matters after every commit, when a reader's page cache
// starts over.
const readerMmapSize = 1 << 30

// hookConnector opens connections through a driver with a connect hook,
// without registering a driver name.
type hookConnector struct {
	dsn    string
	driver *sqlite3.SQLiteDriver
}

func (c hookConnector) Connect(context.Context) (driver.Conn, error) { return c.driver.Open(c.dsn) }
func (c hookConnector) Driver() driver.Driver                        { return c.driver }

// Path returns the database file's path.
func (db *DB) Path() string { return db.path }

// Close stops the checkpointer and closes the pools.
func (db *DB) Close() error {
	var err error
	db.ckpt.stop()
	db.stmts.Range(func(_, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	if db.R != nil {
		err = db.R.Close()
	}
	if e := db.W.Close(); e != nil && err == nil {
		err = e
	}
	// Last: it closes the -shm descriptor, which must outlive every SQLite
	// connection (see walindex.Index).
	db.ver.close()
	return err
}

// NowMs returns the clock's time in Unix milliseconds.
func (db *DB) NowMs() int64 { return db.Now().UnixMilli() }

// migrate applies the steps of the migration sequence (sqlstore's) not
// yet recorded, each in its own immediate transaction, in order. Foreign
// keys are off while they run, as SQLite's way of rebuilding a table
// requires (a step drops a table others refer to and renames its rebuilt
// copy into its place: 0021), and each step checks them before it
// commits: a step that leaves a dangling reference fails and is rolled
// back.
func (db *DB) migrate(ctx context.Context) error {
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrations table: %w", err)
	}
	steps, err := sqlstore.Migrations("sqlite")
	if err != nil {
		return err
	}
	conn, err := db.W.Conn(ctx) // the writer's one connection, whose pragma this is
	if err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	for _, m := range steps {
		if err := migrateStep(ctx, conn, m); err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = ON`); err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	return nil
}

// migrateStep runs one step in an immediate transaction on conn and
// commits it only when no foreign key dangles.
func migrateStep(ctx context.Context, conn *sql.Conn, m sqlstore.Migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := sqlstore.Migrate(ctx, sqlConn{tx}, m, time.Now().UnixMilli()); err != nil {
		return err
	}
	var table string
	switch err := tx.QueryRowContext(ctx, `PRAGMA foreign_key_check`).Scan(&table, new(any), new(any), new(any)); {
	case err == nil:
		return fmt.Errorf("migration %s: a row of %s refers to a row that is gone", m.Name, table)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("migration %s: check foreign keys: %w", m.Name, err)
	}
	return tx.Commit()
}

// WriteTx runs fn in an immediate transaction on the writer.
func (db *DB) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.W.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// MsTime converts Unix milliseconds to a UTC time; 0 or NULL gives zero.
func MsTime(ms sql.NullInt64) time.Time {
	if !ms.Valid || ms.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}

// TimeMs converts t to Unix milliseconds for a nullable column.
func TimeMs(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// readStmt returns a statement for query prepared once on the reader pool
// and kept for the life of db; hot read paths use it to skip re-parsing.
func (db *DB) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if v, ok := db.stmts.Load(query); ok {
		return v.(*sql.Stmt), nil
	}
	st, err := db.R.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	if v, loaded := db.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return v.(*sql.Stmt), nil
	}
	db.nstmts.Add(1)
	return st, nil
}
