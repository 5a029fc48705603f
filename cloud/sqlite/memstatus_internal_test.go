package sqlite

import (
	"context"
	"testing"
)

// TestMemstatusOff checks that SQLite does not count its allocations: the
// setting took (it must come before SQLite initializes) and a store that
// has opened, migrated, written and read shows no memory in SQLite's
// count, which with the counting on is the megabytes its page caches and
// statements hold.
func TestMemstatusOff(t *testing.T) {
	if memstatusErr != nil {
		t.Fatal(memstatusErr)
	}
	db, _ := openTemp(t)
	ctx := context.Background()
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := db.W.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, ?)`, i, "value"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.W.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 100 {
		t.Fatalf("count: %d, %v", n, err)
	}
	if used := sqliteMemoryUsed(); used != 0 {
		t.Errorf("SQLite counts its memory: %d bytes in use by its count, want the counting off (0)", used)
	}
}
