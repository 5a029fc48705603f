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

// walRestartBytes is how large the WAL may grow before the checkpointer
// makes it start over under sustained writes (see restart): half of
// walSizeLimit, so that the file is overwritten in place rather than grown
// (growing it costs the writer a block allocation and a zeroed page cache
// page for every 4 KiB, and made it half again as busy); a variable for
// tests. At 20,000 heartbeats/s the WAL starts over about every 2 s.
var walRestartBytes int64 = walSizeLimit / 2

// walFrameHeader is the size of a WAL frame's header.
const walFrameHeader = 24

// restartPasses bounds the checkpoints restart runs beside the writers
// before holding them off, and restartTail is what one may find committed
// since the one before for restart to hold them off after it.
const (
	restartPasses = 6
	restartTail   = 256
)

// writerGateTimeout bounds the checkpointer's wait for the writer
// connection (restart): it waits for one transaction, which is short.
const writerGateTimeout = 2 * time.Second

// checkpointer runs WAL checkpoints on a dedicated connection.
type checkpointer struct {
	db *sql.DB
	// writer is the store's single-connection writer pool: holding its
	// connection keeps every writer out (restart).
	writer *sql.DB
	conn   *sql.Conn
	// frameSize is the size of a WAL frame: a page and its header.
	frameSize int64
	cancel    context.CancelFunc
	done      chan struct{}
	once      sync.Once

	mu    sync.Mutex
	stats CheckpointStats
}

// CheckpointStats counts the checkpointer's work since the store opened.
type CheckpointStats struct {
	// Passes is how many checkpoints ran to their end.
	Passes int64
	// Restarts is how many times the checkpointer held the writers off to
	// copy the last frames, so that the WAL could start over.
	Restarts int64
	// WriterHeld is the time writers were held off in all, and
	// MaxWriterHeld the longest once (waiting for the connection not
	// counted).
	WriterHeld, MaxWriterHeld time.Duration
}

// startCheckpointer opens the checkpointer's connection (no busy handler:
// a checkpoint never waits for a lock, it tries again next time) and starts
// its goroutine. writer is the store's writer pool (one connection).
func startCheckpointer(ctx context.Context, dsn func(mode string) string, writer *sql.DB, every time.Duration) (*checkpointer, error) {
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
	var page int64
	if err := conn.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&page); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("sqlite: open checkpointer: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, writer: writer, conn: conn, frameSize: page + walFrameHeader, cancel: cancel, done: make(chan struct{})}
	go c.run(runCtx, every)
	return c, nil
}

// run checkpoints every interval: PASSIVE (never blocks the writer or the
// readers), and TRUNCATE once the WAL has been idle and fully copied for a
// tick, so that an idle relay leaves an empty WAL file. The writer restarts
// the WAL from its beginning when its transaction begins after a checkpoint
// copied all of it; under sustained writes that never happens by itself (a
// checkpoint beside the writer ends behind its latest commit), so once the
// WAL holds walRestartBytes the checkpointer makes it happen (restart).
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
		log, copied, err := c.passive(ctx)
		if err != nil {
			continue
		}
		switch {
		case log > 0 && log == copied && log == last:
			// Idle and fully copied: reset the WAL file to zero bytes. With
			// no busy handler this gives up at once if a writer or a reader
			// is in the way.
			c.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
			log = 0
		case log*c.frameSize >= walRestartBytes:
			c.restart(ctx, log)
		}
		last = log
	}
}

// passive runs a PASSIVE checkpoint on the checkpointer's connection and
// returns the frames in the WAL when it began and the frames copied to the
// database file (log == copied does not mean the WAL is all copied: the
// writer may have committed more meanwhile).
func (c *checkpointer) passive(ctx context.Context) (log, copied int64, err error) {
	var busy int64 // 1 when it could not run to its end: the next tick tries again
	err = c.conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied)
	if err == nil && busy == 0 {
		c.mu.Lock()
		c.stats.Passes++
		c.mu.Unlock()
	}
	return log, copied, err
}

// restart holds the writer connection, so that no write transaction is in
// progress, and copies the frames committed since the last checkpoint:
// with all of the WAL in the database file, the next write transaction
// starts the WAL over from its beginning. Passes beside the writers come
// first, each copying what they committed during the one before, until one
// finds little left (restartTail frames) or no longer half as much as the
// one before: the writers then wait for the copy of about that much and
// the pass's two syncs. log is the frames in the WAL when the last pass
// began.
func (c *checkpointer) restart(ctx context.Context, log int64) {
	tail := int64(-1)
	for range restartPasses {
		next, _, err := c.passive(ctx)
		if err != nil || next < log {
			return // or the WAL started over meanwhile
		}
		// Committed during the last pass: what this one copied. Writers
		// faster than the copy would make more passes useless.
		t := next - log
		if t <= restartTail || (tail >= 0 && t > tail/2) {
			break
		}
		log, tail = next, t
	}
	gctx, cancel := context.WithTimeout(ctx, writerGateTimeout)
	defer cancel()
	w, err := c.writer.Conn(gctx)
	if err != nil {
		return
	}
	start := time.Now()
	_, _, err = c.passive(ctx)
	held := time.Since(start)
	w.Close()
	if err != nil {
		return
	}
	c.mu.Lock()
	c.stats.Restarts++
	c.stats.WriterHeld += held
	c.stats.MaxWriterHeld = max(c.stats.MaxWriterHeld, held)
	c.mu.Unlock()
}

// CheckpointStats returns what the background checkpointer has done since
// the store opened.
func (db *DB) CheckpointStats() CheckpointStats { return db.ckpt.snapshot() }

// snapshot returns the checkpointer's counts; nil-safe.
func (c *checkpointer) snapshot() CheckpointStats {
	if c == nil {
		return CheckpointStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
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
