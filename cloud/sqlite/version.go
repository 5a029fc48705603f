package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/fleet/fleet/cloud/sqlite/walindex"
)

// DataVersion returns a number that changes whenever a transaction may have
// been committed to the database since the previous call: by this store's
// writer or by another process (the admin CLI) on the same file. Equal
// numbers from two calls mean nothing was committed in between, so what was
// read before the first call is still current; caches of the request path
// (API key rows, list pages) are tagged with it. Read it before the data it
// tags, never after.
//
// On Linux it compares the header of the WAL index (cloud/sqlite/walindex:
// the -shm file, mapped read-only, which every commit in WAL mode rewrites)
// with the one seen last: a few loads from shared memory. Elsewhere, or when the index
// cannot be mapped, it reads PRAGMA data_version on a dedicated read-only
// connection that never writes (the pragma changes when a connection other
// than the one asking commits).
func (db *DB) DataVersion(ctx context.Context) (uint64, error) {
	return db.ver.read(ctx, db.path)
}

// versionReader keeps the state behind DataVersion.
type versionReader struct {
	db *sql.DB // for the pragma fallback

	mu      sync.Mutex
	counter uint64 // what DataVersion returns
	closed  bool

	// WAL-index header path
	shm       *walindex.Index
	shmTried  bool
	shmMapped bool // shm is usable; otherwise the pragma path
	noShm     bool // tests: use the pragma
	lastHdr   walindex.Header
	hdrValid  bool

	// pragma path
	conn   *sql.Conn // pinned: data_version is per connection
	stmt   *sql.Stmt
	lastDV int64
}

func (v *versionReader) read(ctx context.Context, path string) (uint64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.db == nil {
		return 0, fmt.Errorf("sqlite: data version: store closed")
	}
	if !v.shmTried && !v.noShm {
		v.shmTried = true
		var err error
		// On error shm may still hold the open file, closed in close.
		v.shm, err = walindex.Open(path)
		v.shmMapped = err == nil
	}
	if v.shmMapped && !v.noShm {
		h, ok := v.shm.Header()
		if ok && v.hdrValid && h == v.lastHdr {
			return v.counter, nil
		}
		// Changed, or caught mid-write (the two copies differ): either
		// way, a new number.
		v.counter++
		v.lastHdr, v.hdrValid = h, ok
		return v.counter, nil
	}
	return v.readPragma(ctx)
}

func (v *versionReader) readPragma(ctx context.Context) (uint64, error) {
	fresh := false
	if v.conn == nil {
		c, err := v.db.Conn(ctx)
		if err != nil {
			return 0, fmt.Errorf("sqlite: data version: %w", err)
		}
		st, err := c.PrepareContext(ctx, `PRAGMA data_version`)
		if err != nil {
			c.Close()
			return 0, fmt.Errorf("sqlite: data version: %w", err)
		}
		v.conn, v.stmt, fresh = c, st, true
	}
	var dv int64
	if err := v.stmt.QueryRowContext(ctx).Scan(&dv); err != nil {
		// Start over on a new connection next time; its data_version
		// numbers are unrelated to this one's, hence the counter.
		v.stmt.Close()
		v.conn.Close()
		v.conn, v.stmt = nil, nil
		return 0, fmt.Errorf("sqlite: data version: %w", err)
	}
	if fresh || dv != v.lastDV {
		v.counter++
		v.lastDV = dv
	}
	return v.counter, nil
}

func (v *versionReader) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	if v.stmt != nil {
		v.stmt.Close()
	}
	if v.conn != nil {
		v.conn.Close()
	}
	if v.db != nil {
		v.db.Close()
	}
	// After the pragma connection: see walindex.Index.
	v.shm.Close()
	v.shm = nil
}
