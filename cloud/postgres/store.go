package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

// pgConn runs the statements of cloud/internal/sqlstore (a Querier) on the
// pool or a transaction: their ? placeholders numbered ($1, $2, …),
// pgx.ErrNoRows as sql.ErrNoRows.
type pgConn struct {
	q interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (c pgConn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return pgRow{c.q.QueryRow(ctx, numbered(query), args...)}
}

func (c pgConn) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := c.q.Query(ctx, numbered(query), args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

// pgRows are pgx.Rows as sqlstore.Rows.
type pgRows struct{ pgx.Rows }

func (r pgRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

func (c pgConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, numbered(query), args...)
	return tag.RowsAffected(), err
}

type pgRow struct{ row pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// numbered rewrites the ? placeholders of query as $1, $2, … (and an INSERT
// OR IGNORE as ON CONFLICT DO NOTHING): the one way
// the statements of cloud/internal/sqlstore, written with ? for both
// stores, reach PostgreSQL (they hold no ? in a literal). Most are
// constants and the rest are built per call in a handful of shapes (a
// list page by its filters and cursor, a serial patch by its fields), so
// each is rewritten once and kept (up to maxNumbered of them); a statement
// without ? is its own rewrite.
func numbered(query string) string {
	if strings.IndexByte(query, '?') < 0 && !strings.HasPrefix(query, insertOrIgnore) {
		return query
	}
	if q, ok := numberedCache.Load(query); ok {
		return q.(string)
	}
	q := renumber(query)
	if numberedCount.Load() < maxNumbered {
		if _, loaded := numberedCache.LoadOrStore(query, q); !loaded {
			numberedCount.Add(1)
		}
	}
	return q
}

const maxNumbered = 4096

var (
	numberedCache sync.Map // statement with ? -> with $n
	numberedCount atomic.Int64
)

// insertOrIgnore starts a shared statement that inserts unless a unique
// constraint holds the row already: ON CONFLICT DO NOTHING here.
const insertOrIgnore = "INSERT OR IGNORE INTO "

func renumber(query string) string {
	ignore := strings.HasPrefix(query, insertOrIgnore)
	if ignore {
		query = "INSERT INTO " + query[len(insertOrIgnore):] + " ON CONFLICT DO NOTHING"
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return b.String()
}

// Keys returns db, whose KeyByID finds API keys. The API's key cache keeps
// a row only while DataVersion holds still, so a revocation by any relay or
// the admin CLI shows at the next request.
func (db *DB) Keys() cloud.KeyService { return db }

// Versioner returns db: DataVersion is the server's transaction snapshot.
func (db *DB) Versioner() cloud.Versioner { return db }

// DataVersion counts the transactions the server has finished, as the
// current transaction snapshot sees them (pg_current_snapshot(): every
// transaction id below xmax has finished except those listed as running,
// so the count is xmax less the running ones). A transaction's changes are
// visible to exactly the snapshots that no longer list it as running, and
// a later snapshot sees every transaction an earlier one saw finished: so
// the count grows with each commit or rollback, whichever relay or admin
// command ran it, and two equal versions mean the same transactions were
// visible, so what was read after the first is still what a read now would
// see. It only grows, as the contract asks (the page cache keeps the newest
// version's pages). A log position such as pg_current_wal_insert_lsn()
// would not do: a commit's record is in the log before the commit is
// visible, so a read between the two could be kept at the new position
// without the change. Transactions of any database on the server move it,
// which costs cache hits, never correctness. It is one round trip, which
// the API reads once per request instead of the request's key row and list
// page; requests that arrive together share one read that began after each
// of them arrived (cloud/internal/freshread).
func (db *DB) DataVersion(ctx context.Context) (uint64, error) {
	return db.version.Do(ctx)
}

// versionTimeout bounds one read of the data version: the requests waiting
// for it answer 503 rather than hang on a server that stopped answering.
const versionTimeout = 5 * time.Second

func (db *DB) snapshotVersion(ctx context.Context) (uint64, error) {
	var snap string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return 0, err
	}
	return finishedCount(snap)
}

// finishedCount reads a snapshot's text, xmin:xmax:xip,xip,..., and returns
// how many transaction ids below xmax have finished.
func finishedCount(snap string) (uint64, error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("postgres: snapshot %q: want xmin:xmax:xip", snap)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("postgres: snapshot %q: %w", snap, err)
	}
	running := uint64(0)
	if parts[2] != "" {
		running = uint64(strings.Count(parts[2], ",") + 1)
	}
	if running > xmax {
		return 0, fmt.Errorf("postgres: snapshot %q: more running than started", snap)
	}
	return xmax - running, nil
}

// Ready reports whether the database answers and holds every migration
// this relay knows.
func (db *DB) Ready(ctx context.Context) error {
	pending, err := db.migrationsPending(ctx)
	if err != nil {
		return err
	}
	if pending {
		return errors.New("postgres: database migrations pending (a newer relay's schema is not applied yet)")
	}
	return nil
}

// Stores returns db with the stores of the relay's parts made from it, for
// the relay process named relay in the cluster (the devices' presence,
// webhook leases).
func (db *DB) Stores(relay string) cloud.Stores {
	return cloud.Stores{
		Store: db,
		Now:   func() time.Time { return db.Now() },
		Panel: NewPanelStore(db),
		NewAgentStore: func(log *slog.Logger) (cloud.AgentStoreCloser, error) {
			return NewAgentStore(db, log, relay), nil
		},
		Engine:       NewAlertEngineStore(db),
		Outbox:       NewWebhookStore(db, relay),
		PointHistory: db,
		Commands:     &sqlstore.CommandStore{Tables: &db.Store},
		StaleConfigs: func(ctx context.Context) ([]string, error) { return db.StaleConfigs(ctx, relay) },
		Cluster: &cloud.Cluster{
			Relay:  relay,
			Listen: db.Listen,
			Lease: func(ctx context.Context, name string, ttl time.Duration) (bool, error) {
				return db.TryLease(ctx, name, relay, ttl)
			},
		},
	}
}
