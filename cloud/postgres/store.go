package postgres

import (
	"context"
	"errors"
	"hash/fnv"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

// tables are db's tables in PostgreSQL's dialect, under the services of
// cloud/internal/sqlstore.
type tables struct{ db *DB }

var _ sqlstore.Tables = tables{}

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
