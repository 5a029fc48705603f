package postgres_test

import (
	"context"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/dialects"
)

// stores is the binary's PostgreSQL server and its template database
// (test/rig/dialects), shared with every store test of this package.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

// TestStore runs the shared store suite on a PostgreSQL database per test.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now cloud.Now) storetest.Stores {
		return openStores(t, migratedDB(t), now, "relay-1")
	})
}

// migratedDB returns the URL of a fresh database with the schema applied.
func migratedDB(t testing.TB) string {
	t.Helper()
	return stores.PostgresURL(t)
}

// openDB opens the store on url, closed when the test ends.
func openDB(t testing.TB, url string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openStores(t testing.TB, url string, now cloud.Now, relay string) storetest.Stores {
	t.Helper()
	return dialects.PostgresAt(t, url, now, relay)
}
