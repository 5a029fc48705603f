package walindex_test

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/fleet/fleet/cloud/sqlite/walindex"
)

// openWAL opens the database at path in WAL mode with one connection.
func openWAL(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

func exec1(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestHeaderChangesWithCommitsOnly: the header stays equal while nothing is
// committed (reads, by any connection, do not move it) and differs after a
// commit by another connection of this process, by another process, and
// after a checkpoint that restarts the WAL followed by a commit.
func TestHeaderChangesWithCommitsOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.db")
	writer := openWAL(t, path)
	exec1(t, writer, `CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1)`)
	reader := openWAL(t, path)
	ix, err := walindex.Open(path)
	// The index outlives every SQLite connection (see Index).
	t.Cleanup(ix.Close)
	t.Cleanup(func() { reader.Close() })
	t.Cleanup(func() { writer.Close() })
	if err != nil {
		t.Fatal(err)
	}
	header := func() walindex.Header {
		t.Helper()
		h, ok := ix.Header()
		if !ok {
			t.Fatal("the header is not readable (no commit is writing it)")
		}
		return h
	}
	same := func(what string, before walindex.Header) {
		t.Helper()
		if h := header(); h != before {
			t.Fatalf("%s moved the header without a commit", what)
		}
	}
	changed := func(what string, before walindex.Header) walindex.Header {
		t.Helper()
		h := header()
		if h == before {
			t.Fatalf("%s left the header as it was", what)
		}
		return h
	}

	h := header()
	same("a second look", h)
	var n int
	if err := reader.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("read: %d, %v", n, err)
	}
	same("a read by another connection", h)

	exec1(t, writer, `INSERT INTO t VALUES (2)`)
	h = changed("a commit by another connection", h)
	same("a look after the commit", h)

	if out, err := helper(path); err != nil || out != "ok" {
		t.Fatalf("the other process: %q, %v", out, err)
	}
	h = changed("a commit by another process", h)

	exec1(t, writer, `PRAGMA wal_checkpoint(TRUNCATE)`)
	h = header()
	exec1(t, reader, `INSERT INTO t VALUES (4)`)
	changed("a commit after a WAL restart", h)
}

// TestOpenNeedsAWALIndex: a database without an initialized WAL index (not
// in WAL mode) cannot be opened, and its Index reports not ok; closing it
// is safe.
func TestOpenNeedsAWALIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rollback.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=DELETE")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, db, `CREATE TABLE t (v INTEGER)`)
	ix, err := walindex.Open(path)
	if err == nil {
		t.Error("a database in rollback-journal mode opened")
	}
	if _, ok := ix.Header(); ok {
		t.Error("an index that failed to open gave a header")
	}
	db.Close()
	ix.Close()
}

// helper runs TestHelperCommit in a new process, which commits to the
// database at path, and returns what it printed.
func helper(path string) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCommit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WALINDEX_COMMIT="+path)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "helper: "); ok {
			return r, err
		}
	}
	return string(out), err
}

// TestHelperCommit is the other process of TestHeaderChangesWithCommitsOnly;
// it does nothing unless WALINDEX_COMMIT is set.
func TestHelperCommit(t *testing.T) {
	path := os.Getenv("WALINDEX_COMMIT")
	if path == "" {
		return
	}
	db := openWAL(t, path)
	_, err := db.Exec(`INSERT INTO t VALUES (3)`)
	db.Close()
	if err != nil {
		fmt.Println("helper:", err)
		return
	}
	fmt.Println("helper: ok")
}
