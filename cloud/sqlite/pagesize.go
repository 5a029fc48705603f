package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// pageSize is the page size of a database file the relay creates. The
// agent endpoint's writes are scattered single-row updates (a device row,
// with its channels' reports, and its serial state row when the applied
// version moves), and every commit appends each page it touched to the WAL
// whole: with 2 KiB pages instead of SQLite's default 4 KiB, the store
// writer spent half as much time per heartbeat, committing and modifying
// pages alike (docs/benchmarks.md). 2 KiB rather than 1 KiB keeps a
// device row of up to 2,013 bytes (with its channel reports and their
// points' states) on its page before an overflow page is needed (989 at
// 1 KiB). A file that already exists keeps the page size it was made with.
const pageSize = 2048

// initPageSize gives a new (missing or empty) database file at path the
// relay's page size and WAL mode; the page size is fixed from then on.
func initPageSize(path string) error {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return nil
	}
	// A new database is created 0600: it holds key and token hashes and
	// webhook signing secrets. SQLite gives its -wal and -shm files the
	// database's mode.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	defer db.Close()
	// journal_mode=WAL writes the database header, with the page size.
	if _, err := db.Exec(fmt.Sprintf("PRAGMA page_size = %d; PRAGMA journal_mode = WAL", pageSize)); err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	return nil
}
