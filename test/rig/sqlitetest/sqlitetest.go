// Package sqlitetest opens the relay's SQLite store itself (*sqlite.DB,
// a real file in the test's temporary directory, closed when the test
// ends) for the tests about that store rather than the contract:
// cloud/sqlite's own tests and benchmarks, the relay's backup test (OpenCopy
// checks a backup as an operator restoring it would), benchstore's test
// and the API's count of data-version reads. Org and Device make the
// organizations and devices they start from, as the admin CLI does. The
// tests of the packages above the store use test/rig/dialects and
// its seed helpers instead, and run on both stores.
package sqlitetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

// Open opens a store on a new file (fleet.db) in tb's temporary directory;
// it is closed when the test ends, after the cleanups registered later.
func Open(tb testing.TB) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "fleet.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// Org creates an organization.
func Org(tb testing.TB, db *sqlite.DB, name string) cloud.Org {
	tb.Helper()
	org, err := db.CreateOrg(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return org
}

// Device adds a device and returns it with its agent token.
func Device(tb testing.TB, db *sqlite.DB, nd cloud.NewDevice) (resource.DeviceDetail, string) {
	tb.Helper()
	d, token, err := db.AddDevice(context.Background(), nd)
	if err != nil {
		tb.Fatal(err)
	}
	return d, token
}

// OpenCopy checks a copy of a store (a backup) as an operator restoring
// it would, PRAGMA integrity_check answering ok on a read-only handle,
// then opens it as a store, closed when the test ends.
func OpenCopy(tb testing.TB, path string) *sqlite.DB {
	tb.Helper()
	raw, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		tb.Fatal(err)
	}
	var check string
	err = raw.QueryRow(`PRAGMA integrity_check`).Scan(&check)
	raw.Close()
	if err != nil || check != "ok" {
		tb.Fatalf("%s: integrity_check %q, %v", path, check, err)
	}
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
