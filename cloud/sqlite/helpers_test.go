package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
)

// MustOpen opens a store on a fresh file in a temp dir.
func MustOpen(tb testing.TB) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "fleet.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// MustOrg creates an organization.
func MustOrg(tb testing.TB, db *sqlite.DB, name string) cloud.Org {
	tb.Helper()
	o, err := db.CreateOrg(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}
