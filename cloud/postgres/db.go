// Package postgres is the relay's store on PostgreSQL (jackc/pgx, a
// pgxpool pool): the same contract as cloud/sqlite (cloud.Store and the
// agent endpoint's, alert engine's and outbox's stores), for any number of
// relays sharing one database. Embedded SQL migrations are applied at open
// under an advisory lock, so relays started together migrate once; metrics
// and events live in tables partitioned by day, created ahead and on
// demand, and retention drops whole partitions.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/freshread"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// Advisory lock keys (pg_advisory_lock): one for migrations, one for
// partition changes. Arbitrary constants, "fleet" in their high bytes.
const (
	lockMigrate    int64 = 0x666c656574_0001
	lockPartitions int64 = 0x666c656574_0002
)

// DB is an open store.
type DB struct {
	// Pool is the connection pool.
	Pool *pgxpool.Pool
	// Now is the clock.
	Now cloud.Now

	url      string // with the password, for the listener's own connection
	password string // redacted from every error (see redact)

	version *freshread.Reads // DataVersion's reads, shared by requests that arrive together

	partMu sync.Mutex
	parts  map[string]bool // partitions known to exist, by name

	sqlstore.Services // Devices, Serial, Alerts, Observe
	// the queries written once for both stores, in PostgreSQL's dialect
	sqlstore.Store
}

// Open connects to the database named by url (any URL or keyword/value
// string pgx accepts, e.g. postgres://user:pw@host:5432/db?sslmode=require
// &pool_max_conns=20) and applies pending migrations. A wrong password or
// an unreachable server fails here with a message that names the host,
// database and user, never the password.
func Open(ctx context.Context, url string) (*DB, error) {
	pw := passwordOf(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, redact(fmt.Errorf("postgres: %w", err), pw)
	}
	if pw == "" {
		pw = cfg.ConnConfig.Password
	}
	if !hasParam(url, "pool_max_conns") {
		cfg.MaxConns = 16
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, redact(fmt.Errorf("postgres: %w", err), pw)
	}
	db := &DB{Pool: pool, Now: time.Now, url: url, password: pw, parts: map[string]bool{}}
	db.Services = sqlstore.NewServices(&db.Store)
	d := dialect
	d.EventsAt = func(ctx context.Context, atMs int64) error { return db.ensureDays(ctx, "events", atMs) }
	db.Store = sqlstore.Store{Dialect: d, R: pgConn{pool}, W: pgConn{pool}, Clock: func() time.Time { return db.Now() },
		Tx: func(ctx context.Context, fn func(sqlstore.Querier) error) error {
			return db.writeTx(ctx, func(tx pgx.Tx) error { return fn(pgConn{tx}) })
		}}
	db.version = freshread.New(db.snapshotVersion, versionTimeout)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, redact(fmt.Errorf("postgres: connect to %s: %w", describe(cfg), err), pw)
	}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, redact(err, pw)
	}
	if err := db.ensureAhead(ctx); err != nil {
		pool.Close()
		return nil, redact(err, pw)
	}
	return db, nil
}

// describe names where cfg connects, without the password.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s:%d database %q as user %q", c.Host, c.Port, c.Database, c.User)
}

// passwordOf returns the password of a postgres:// URL, or "".
func passwordOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

func hasParam(raw, name string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.Contains(raw, name+"=")
	}
	return u.Query().Has(name)
}

// redactedError hides a password in the text of an error it wraps.
type redactedError struct {
	err error
	pw  string
}

func (e *redactedError) Error() string { return strings.ReplaceAll(e.err.Error(), e.pw, "xxxxx") }
func (e *redactedError) Unwrap() error { return e.err }

func redact(err error, pw string) error {
	if err == nil || pw == "" {
		return err
	}
	return &redactedError{err: err, pw: pw}
}

// Close closes the pool.
func (db *DB) Close() error {
	db.Pool.Close()
	return nil
}

// NowMs returns the clock's time in Unix milliseconds.
func (db *DB) NowMs() int64 { return db.Now().UnixMilli() }

// migrate applies the steps of the migration sequence (sqlstore's) not
// yet recorded, each in its own transaction, in order, holding the
// migration lock: a relay
// that starts while another migrates waits for it and then finds nothing
// left to do.
func (db *DB) migrate(ctx context.Context) error {
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return storeError("postgres: migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockMigrate); err != nil {
		return storeError("postgres: migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockMigrate)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		return storeError("postgres: migrations table: %w", err)
	}
	steps, err := sqlstore.Migrations("postgres")
	if err != nil {
		return err
	}
	for _, m := range steps {
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			return sqlstore.Migrate(ctx, pgConn{tx}, m, time.Now().UnixMilli())
		})
		if err != nil {
			return storeError("postgres: %w", err)
		}
	}
	return analyzeUnplanned(ctx, conn.Conn())
}

// analyzeUnplanned runs ANALYZE on each table that holds rows but has no
// statistics yet, which PostgreSQL's autovacuum leaves so until enough rows
// change: a database made with CREATE DATABASE ... TEMPLATE, or loaded in
// bulk (store copy, pg_restore) just before relays start. Without
// statistics the planner takes an organization's devices for a handful of
// rows and answers the first page of GET /devices by sorting them all (7 ms
// for 10,000 devices, against 0.1 ms along the (org_id, created_at, id)
// index). Empty tables and tables with statistics are left alone, and so
// are the metrics and events partitions, which autovacuum analyzes as
// samples arrive.
func analyzeUnplanned(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
		AND pg_relation_size(c.oid) > 0
		AND NOT EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = current_schema() AND s.tablename = c.relname)
		ORDER BY 1`)
	if err != nil {
		return storeError("postgres: tables without statistics: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return storeError("postgres: tables without statistics: %w", err)
	}
	for _, t := range tables {
		// t is the table's name as regclass prints it: quoted where needed.
		if _, err := conn.Exec(ctx, `ANALYZE `+t); err != nil {
			return storeError("postgres: analyze %s: %w", t, err)
		}
	}
	return nil
}

// migrationsPending reports whether embedded migrations are not applied
// yet.
func (db *DB) migrationsPending(ctx context.Context) (bool, error) {
	steps, err := sqlstore.Migrations("postgres")
	if err != nil {
		return false, err
	}
	names, err := sqlstore.Collect(ctx, db.R, sqlstore.ScanString, `SELECT name FROM schema_migrations`)
	if err != nil {
		return false, err
	}
	return sqlstore.Pending(steps, names), nil
}

// writeTx runs fn in a transaction (read committed).
func (db *DB) writeTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.Pool, fn)
}

// timeMs converts t to nullable Unix milliseconds.
var timeMs = sqlstore.NullMs

// dialect is PostgreSQL's: the shared statements' placeholders numbered
// and INSERT OR IGNORE spelt ON CONFLICT DO NOTHING (pgConn), errors of an
// unreachable server ESERVICEUNAVAILABLE, other relays told of changes by
// NOTIFY, an organization's users changed under a lock on its row.
var dialect = sqlstore.Dialect{
	Name:     "postgres",
	IsUnique: isUnique,
	Classify: func(err error) error {
		if unreachable(err) {
			return cloud.Unavailable(err)
		}
		return err
	},
	Changed: func(ctx context.Context, tx sqlstore.Querier, c sqlstore.Change, id string) error {
		channel := map[sqlstore.Change]string{sqlstore.ChangeOutbox: channelOutbox, sqlstore.ChangeRevoked: channelRevoked, sqlstore.ChangeConfig: channelConfig,
			sqlstore.ChangeRules: channelRules, sqlstore.ChangeDeviceTags: channelDeviceTags}[c]
		_, err := tx.Exec(ctx, `SELECT pg_notify(?, ?)`, channel, id)
		return err
	},
	LockOrg: `SELECT 1 FROM orgs WHERE id = ? FOR UPDATE`,
	// One substring test for every quoted tag, as sqlstore.TagsWhere
	// explains (strpos: SQLite's instr), cheaper than reading each row's
	// text as jsonb.
	HasTags: func(tags []string) (string, []any) {
		where := make([]string, len(tags))
		args := make([]any, len(tags))
		for i, t := range tags {
			where[i], args[i] = `strpos(devices.tags, ?) > 0`, sqlstore.QuotedTag(t)
		}
		return strings.Join(where, ` AND `), args
	},
	LockRows:    " FOR UPDATE",
	SkipLocked:  " FOR UPDATE SKIP LOCKED",
	OfflineAlso: ", agent_relay = NULL",
}

// storeError formats an error of the store (as fmt.Errorf); one caused by
// the database being unreachable (refused or lost connections, a server
// shutting down or starting, a network timeout) becomes cloud.ESERVICEUNAVAILABLE,
// which the API answers with 503 and clients retry.
func storeError(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if unreachable(err) {
		return cloud.Unavailable(err)
	}
	return err
}

// unreachable reports an error of a database that cannot be reached, as
// opposed to one that answered with an error.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P: operator intervention (shutdown,
		// crash, starting up).
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// isUnique reports a unique-constraint violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isNoPartition reports a row whose time has no partition.
func isNoPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition")
}
