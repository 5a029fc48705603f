package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

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
