package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Checkpointing is off the writer's commit path: the writer connection has
// wal_autocheckpoint=0, and a checkpointer goroutine copies the WAL back
// into the database file on its own connection, concurrently with writes.
// An automatic checkpoint used to run inside whichever commit crossed 1000
// WAL pages, stalling the single writer (and every heartbeat and webhook
// batch queued behind it) for the checkpoint's I/O and fsync.

// checkpointInterval is how often the checkpointer runs a PASSIVE
// checkpoint; a variable for tests.
var checkpointInterval = 500 * time.Millisecond

// walSizeLimit is the writer's journal_size_limit: when the WAL restarts
// from its beginning (after a checkpoint copied all of it), a file larger
// than this is truncated to it.
const walSizeLimit = 64 << 20

// checkpointer runs WAL checkpoints on a dedicated connection.
type checkpointer struct {
	db     *sql.DB
	conn   *sql.Conn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startCheckpointer opens the checkpointer's connection (no busy handler:
// a checkpoint never waits for a lock, it tries again next time) and starts
// its goroutine.
func startCheckpointer(ctx context.Context, dsn func(mode string) string, every time.Duration) (*checkpointer, error) {
	db := sql.OpenDB(hookConnector{dsn: dsn(""), driver: &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(`PRAGMA busy_timeout = 0`, nil)
		return err
	}}})
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open checkpointer: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, conn: conn, cancel: cancel, done: make(chan struct{})}
	go c.run(runCtx, every)
	return c, nil
}

// run checkpoints every interval: PASSIVE (never blocks the writer or the
// readers), and TRUNCATE once the WAL has been idle and fully copied for a
// tick, so that an idle relay leaves an empty WAL file. While writes go on,
// the writer restarts the WAL from its beginning whenever a checkpoint has
// copied all of it, so the file stays bounded by what is written between
// checkpoints (and by walSizeLimit).
func (c *checkpointer) run(ctx context.Context, every time.Duration) {
	defer close(c.done)
	t := time.NewTicker(every)
	defer t.Stop()
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var busy, log, copied int64
		if err := c.conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied); err != nil {
			continue
		}
		if log > 0 && log == copied && log == last {
			// Idle and fully copied: reset the WAL file to zero bytes. With
			// no busy handler this gives up at once if a writer or a reader
			// is in the way.
			c.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
			log = 0
		}
		last = log
	}
}

// stop stops the goroutine and closes the connection; nil-safe, idempotent.
func (c *checkpointer) stop() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		c.cancel()
		<-c.done
		c.conn.Close()
		c.db.Close()
	})
}
