package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/fleet/fleet/cloud/sqlite"
)

func TestOpenAppliesMigrationsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		db, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("open #%d: %v", i+1, err)
		}
		var mode string
		if err := db.R.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" {
			t.Errorf("journal_mode = %q, want wal", mode)
		}
		var n int
		if err := db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no migration recorded")
		}
		db.Close()
	}
}

// A database the relay creates gets 2 KiB pages (pagesize.go); one made
// before, with SQLite's default 4 KiB, keeps its pages and its data.
func TestOpenPageSize(t *testing.T) {
	ctx := context.Background()
	pageSize := func(db *sqlite.DB) int {
		t.Helper()
		var n int
		if err := db.R.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	fresh := filepath.Join(t.TempDir(), "new.db")
	db, err := sqlite.Open(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if got := pageSize(db); got != 2048 {
		t.Errorf("new database: page_size = %d, want 2048", got)
	}
	db.Close()

	old := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite3", "file:"+old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE keep (v TEXT); INSERT INTO keep VALUES ('kept')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db, err = sqlite.Open(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := pageSize(db); got != 4096 {
		t.Errorf("existing database: page_size = %d, want its own 4096", got)
	}
	var v string
	if err := db.R.QueryRowContext(ctx, `SELECT v FROM keep`).Scan(&v); err != nil || v != "kept" {
		t.Errorf("existing data: %q, %v", v, err)
	}
}
