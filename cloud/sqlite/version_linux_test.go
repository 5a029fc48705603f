package sqlite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// walIndexDMS is the byte of the -shm file on which every SQLite process
// using the database holds a shared lock (UNIX_SHM_DMS in os_unix.c: the
// 8 lock bytes from offset 120, then this one). A process that can lock it
// exclusively believes it is alone and rebuilds the WAL index.
const walIndexDMS = 128

// TestDataVersionKeepsSQLiteLocks: mapping the WAL index for DataVersion
// must not drop SQLite's own POSIX locks on the -shm file (closing any
// descriptor of a file drops all of the process's locks on it). Another
// process, as the admin CLI is, must still see the store's lock, and its
// writes must leave the relay's next commit and the file intact (before the
// fix the relay died of SIGBUS in a commit after the CLI rebuilt the index).
func TestDataVersionKeepsSQLiteLocks(t *testing.T) {
	ctx := context.Background()
	db, path := openTemp(t)
	if _, err := db.CreateOrg(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := db.DataVersion(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !db.ver.shmMapped {
		t.Fatal("the WAL index was not mapped; this test covers the mapped path")
	}

	if got := childProbe(t, "lock", path); !strings.HasPrefix(got, "locked by ") {
		t.Fatalf("another process sees the -shm DMS byte %s, want it locked by this process (%d)", got, os.Getpid())
	}
	if got := childProbe(t, "write", path); got != "ok" {
		t.Fatalf("a second process writing: %s", got)
	}
	// The store commits and reads on after the other process's write.
	if _, err := db.CreateOrg(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM orgs WHERE name IN ('before', 'child', 'after')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.W.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil {
		t.Fatal(err)
	}
	if n != 3 || check != "ok" {
		t.Fatalf("after a second process wrote: %d of 3 organizations, integrity_check %q", n, check)
	}
}

// childProbe runs TestHelperSHMProbe in a new process and returns what it
// printed.
func childProbe(t *testing.T, what, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSHMProbe$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FLEET_SHM_PROBE="+what+":"+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe %s: %v\n%s", what, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "probe: "); ok {
			return r
		}
	}
	t.Fatalf("probe %s printed no result:\n%s", what, out)
	return ""
}

// TestHelperSHMProbe is the other process of TestDataVersionKeepsSQLiteLocks;
// it does nothing unless FLEET_SHM_PROBE is set.
func TestHelperSHMProbe(t *testing.T) {
	what, path, ok := strings.Cut(os.Getenv("FLEET_SHM_PROBE"), ":")
	if !ok {
		return
	}
	switch what {
	case "lock":
		f, err := os.OpenFile(path+"-shm", os.O_RDWR, 0)
		if err != nil {
			fmt.Println("probe:", err)
			return
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: walIndexDMS, Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
			fmt.Println("probe:", err)
		} else if lk.Type == unix.F_UNLCK {
			fmt.Println("probe: unlocked")
		} else {
			fmt.Printf("probe: locked by %d\n", lk.Pid)
		}
		f.Close()
	case "write":
		ctx := context.Background()
		db, err := Open(ctx, path)
		if err != nil {
			fmt.Println("probe:", err)
			return
		}
		_, err = db.CreateOrg(ctx, "child")
		db.Close()
		if err != nil {
			fmt.Println("probe:", err)
			return
		}
		fmt.Println("probe: ok")
	}
}
