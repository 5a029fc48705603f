package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// openTemp opens a store on a new file in tb's temporary directory, closed
// when tb ends, and returns it with the file's path.
func openTemp(tb testing.TB) (*DB, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "fleet.db")
	db, err := Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, path
}
