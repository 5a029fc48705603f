package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckpointerBoundsWAL writes bursts of commits through the writer,
// which never checkpoints itself, and checks that the background
// checkpointer keeps the -wal file bounded, empties it once writes stop, and
// is stopped by Close.
func TestCheckpointerBoundsWAL(t *testing.T) {
	defer func(d time.Duration) { checkpointInterval = d }(checkpointInterval)
	checkpointInterval = 20 * time.Millisecond
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var auto int
	if err := db.W.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d, want 0", auto)
	}
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE t (v BLOB)`); err != nil {
		t.Fatal(err)
	}
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	blob := []byte(strings.Repeat("x", 4000))
	const bursts, perBurst = 40, 100 // ~16 MB through the WAL in all
	// Without checkpoints during the writes the WAL would hold all ~16 MB;
	// half of it bounds it without timing the checkpointer's turns, which a
	// loaded machine delays (20 ms ticks have measured up to 6 MB here).
	const bound = 8 << 20
	var max int64
	for b := 0; b < bursts; b++ {
		for i := 0; i < perBurst; i++ {
			if _, err := db.W.ExecContext(ctx, `INSERT INTO t (v) VALUES (?)`, blob); err != nil {
				t.Fatal(err)
			}
		}
		if s := walSize(); s > max {
			max = s
		}
		time.Sleep(2 * checkpointInterval)
	}
	if max > bound {
		t.Errorf("WAL grew to %d bytes under sustained writes, want <= %d", max, bound)
	}
	deadline := time.Now().Add(2 * time.Second)
	for walSize() > 0 && time.Now().Before(deadline) {
		time.Sleep(checkpointInterval)
	}
	if s := walSize(); s > 0 {
		t.Errorf("WAL is %d bytes after writes stopped, want truncated to 0", s)
	}
	var n int
	if err := db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != bursts*perBurst {
		t.Fatalf("rows = %d, %v; want %d", n, err, bursts*perBurst)
	}
	ck := db.ckpt
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ck.done:
	default:
		t.Fatal("checkpointer goroutine still running after Close")
	}
}
