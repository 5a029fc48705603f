package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// DataVersion returns a number that changes whenever a transaction may have
// been committed to the database since the previous call: by this store's
// writer or by another process (the admin CLI) on the same file. Equal
// numbers from two calls mean nothing was committed in between, so what was
// read before the first call is still current; caches of the request path
// (API key rows, list pages) are tagged with it.
//
// It is SQLite's PRAGMA data_version, read on a dedicated read-only
// connection that never writes (the pragma changes when a connection other
// than the one asking commits), made monotonic across a reconnect. One
// call costs one small statement, no table access.
func (db *DB) DataVersion(ctx context.Context) (uint64, error) {
	return db.ver.read(ctx)
}

// versionReader serializes data_version reads on one pinned connection.
type versionReader struct {
	db *sql.DB

	mu      sync.Mutex
	conn    *sql.Conn // pinned: data_version is per connection
	stmt    *sql.Stmt
	last    int64  // the connection's last data_version
	counter uint64 // what DataVersion returns
	closed  bool
}

func (v *versionReader) read(ctx context.Context) (uint64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.db == nil {
		return 0, fmt.Errorf("sqlite: data version: store closed")
	}
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
	if fresh || dv != v.last {
		v.counter++
		v.last = dv
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
}

// DataVersion is the store's DataVersion; the API caches list pages with it.
func (s *DeviceService) DataVersion(ctx context.Context) (uint64, error) {
	return s.db.DataVersion(ctx)
}

// DataVersion is the store's DataVersion; the API caches list pages with it.
func (s *AlertService) DataVersion(ctx context.Context) (uint64, error) {
	return s.db.DataVersion(ctx)
}
