package sqlite

import (
	"context"
	"fmt"
	"os"
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
	db, path := openTemp(t)
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
	walSize := func() int64 { return walFileSize(path) }
	blob := []byte(strings.Repeat("x", 4000))
	const bursts, perBurst = 40, 100 // ~16 MB through the WAL in all
	// Without checkpoints during the writes the WAL would hold all ~16 MB;
	// with the pauses below it holds a burst or two (~0.5 MB each). Half of
	// the 16 MB bounds it with room to spare (a pause used to be timed, and
	// a loaded machine let the WAL reach 9.3 MB).
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
		// A pause: two passes of the checkpointer, the second begun after
		// the burst, so it copied all of it and the next write starts the
		// WAL over. Counted, not timed: a loaded machine delays the
		// checkpointer's ticks.
		for p, deadline := db.CheckpointStats().Passes, time.Now().Add(10*time.Second); db.CheckpointStats().Passes < p+2; {
			if time.Now().After(deadline) {
				t.Fatalf("the checkpointer ran %d passes in 10 s", db.CheckpointStats().Passes-p)
			}
			time.Sleep(checkpointInterval / 4)
		}
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

// TestCheckpointerRestartsWALUnderSustainedWrites writes commits back to
// back, with no pause for the checkpointer to catch up, and checks that the
// -wal file still stays bounded: a checkpoint beside the writer always
// ends behind its latest commit, so without the checkpointer's restart
// the WAL never starts over and grows by everything written.
func TestCheckpointerRestartsWALUnderSustainedWrites(t *testing.T) {
	defer func(d time.Duration, b int64) { checkpointInterval, walRestartBytes = d, b }(checkpointInterval, walRestartBytes)
	checkpointInterval = 50 * time.Millisecond
	walRestartBytes = 2 << 20
	ctx := context.Background()
	db, path := openTemp(t)
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	walSize := func() int64 { return walFileSize(path) }
	// Updates in place over 20,000 rows of 700 bytes (about three to a
	// page), 300 rows a transaction in a scattered order, as the relay's
	// heartbeats: the database stays at ~16 MB while ~96 MB go through the
	// WAL.
	const rows, perTx = 20000, 300
	blob := []byte(strings.Repeat("x", 700))
	if _, err := db.W.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < ?) INSERT INTO t SELECT i, ? FROM n`, rows, blob); err != nil {
		t.Fatal(err)
	}
	// Start from an empty WAL file (a TRUNCATE checkpoint gives up while
	// the checkpointer's own runs).
	for deadline := time.Now().Add(10 * time.Second); walSize() > 0; {
		if _, err := db.W.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAL is %d bytes after TRUNCATE checkpoints", walSize())
		}
	}
	const total = 96 << 20
	var max, written int64
	for k := 0; written < total; k++ {
		tx, err := db.W.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		copy(blob, fmt.Sprintf("%08d", k)) // an unchanged row is not written
		for i := range perTx {
			if _, err := tx.ExecContext(ctx, `UPDATE t SET v = ? WHERE id = ?`, blob, 1+(k*perTx+i)*7919%rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		written += perTx * 2072
		if s := walSize(); s > max {
			max = s
		}
	}
	// What the writer commits in a few of the checkpointer's intervals,
	// with slack for a slow machine; without restarts the WAL holds all
	// 96 MB.
	const bound = 32 << 20
	if max > bound {
		t.Errorf("WAL grew to %d bytes under back-to-back commits (%d bytes written), want <= %d", max, written, bound)
	}
	if st := db.CheckpointStats(); st.Restarts == 0 {
		t.Errorf("checkpointer stats %+v: no restart", st)
	}
	t.Logf("WAL at most %d bytes; %+v", max, db.CheckpointStats())
}

// walFileSize is the size of the -wal file of the database at path (0
// when there is none).
func walFileSize(path string) int64 {
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		return 0
	}
	return fi.Size()
}
