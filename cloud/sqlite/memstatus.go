package sqlite

/*
// SQLite's own functions, compiled into github.com/mattn/go-sqlite3 (or
// the system's libsqlite3 under that package's libsqlite3 build tag).
// sqlite3_config is variadic, which cgo cannot call: the wrapper does.
extern int sqlite3_config(int, ...);
extern int sqlite3_status64(int, long long *, long long *, int);

static int fleet_sqlite_memstatus(int on) {
	return sqlite3_config(9, on); // SQLITE_CONFIG_MEMSTATUS
}

static long long fleet_sqlite_memory_used(void) {
	long long cur = 0, hi = 0;
	sqlite3_status64(0, &cur, &hi, 0); // SQLITE_STATUS_MEMORY_USED
	return cur;
}
*/
import "C"

import "fmt"

// SQLite counts every allocation it makes, for sqlite3_memory_used and
// sqlite3_status, under a process-wide mutex, unless told not to before
// it initializes (SQLITE_CONFIG_MEMSTATUS; SQLite's list of recommended
// options has SQLITE_DEFAULT_MEMSTATUS=0 for this reason). The relay
// reads none of those figures, and the counting was four in five of the
// 114 mutex lock and unlock pairs the store writer took per heartbeat
// (counted with a uprobe on pthread_mutex_lock under
// BenchmarkWriterHeartbeatTx; docs/benchmarks.md). It is turned off here,
// in the package's init: SQLite initializes at the first connection any
// package opens, which is after every init has run.
var memstatusErr = func() error {
	if rc := C.fleet_sqlite_memstatus(0); rc != 0 {
		// SQLITE_MISUSE: SQLite was already initialized; the counting
		// stays on, which costs time and nothing else.
		return fmt.Errorf("sqlite: SQLITE_CONFIG_MEMSTATUS refused (code %d)", int(rc))
	}
	return nil
}()

// sqliteMemoryUsed is sqlite3_memory_used's figure: 0 while the counting
// is off.
func sqliteMemoryUsed() int64 { return int64(C.fleet_sqlite_memory_used()) }
