// Package sqlitetest is the store of the tests of the relay's packages
// above it (alerts, webhooks, the agents' endpoint, the panel, the API):
// a real SQLite file in the test's temporary directory, closed when the
// test ends, and the organizations and devices a test starts from, made
// through the store as the admin CLI makes them.
package sqlitetest

import (
	"context"
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
