package postgres

import (
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

// tables are db's tables in PostgreSQL's dialect, under the services of
// cloud/internal/sqlstore.
type tables struct{ db *DB }

var _ sqlstore.Tables = tables{}

// pgTx is a transaction as the code of cloud/internal/sqlstore runs it: its
// ? placeholders numbered ($1, $2, …), pgx.ErrNoRows as sql.ErrNoRows.
type pgTx struct{ tx pgx.Tx }

func (t pgTx) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return pgRow{t.tx.QueryRow(ctx, numbered(query), args...)}
}

func (t pgTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, numbered(query), args...)
	return err
}

type pgRow struct{ row pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// numbered rewrites the ? placeholders of query as $1, $2, … (the shared
// statements hold no ? in a literal).
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteString(sqlstore.Dollar(n))
	}
	return b.String()
}

// Keys returns db, whose KeyByID finds API keys. The API's key cache keeps
// a row only while DataVersion holds still, so a revocation by any relay or
// the admin CLI shows at the next request.
func (db *DB) Keys() cloud.KeyService { return db }

// Versioner returns db: DataVersion is the server's transaction snapshot.
func (db *DB) Versioner() cloud.Versioner { return db }

// DataVersion is a hash of the server's current transaction snapshot
// (pg_current_snapshot(): the oldest running transaction, the next to
// start and those running between). A transaction that commits or rolls
// back after one snapshot is taken leaves every later snapshot different,
// whichever relay or admin command ran it, and a transaction's changes are
// visible to exactly the snapshots that no longer list it as running: so
// two equal versions mean nothing was committed in between, and what was
// read after the first is still what a read now would see. (A log position
// such as pg_current_wal_insert_lsn() would not do: a commit's record is in
// the log before the commit is visible, so a read between the two could be
// kept at the new position without the change.) Transactions of any
// database on the server move it, which costs cache hits, never
// correctness. It is one round trip, read once per API request
// (cloud.MemoVersion), instead of the request's key row and list page.
func (db *DB) DataVersion(ctx context.Context) (uint64, error) {
	return cloud.MemoVersion(ctx, db.snapshotVersion)
}

func (db *DB) snapshotVersion(ctx context.Context) (uint64, error) {
	var snap string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return 0, err
	}
	h := fnv.New64a()
	h.Write([]byte(snap))
	return h.Sum64(), nil
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
