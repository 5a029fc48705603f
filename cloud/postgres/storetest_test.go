package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/pgtest"
)

var srv *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &srv) }

// TestStore runs the shared store suite on a PostgreSQL database per test.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now cloud.Now) storetest.Stores {
		return openStores(t, migratedDB(t), now, "relay-1")
	})
}

var template struct {
	once sync.Once
	name string
	err  error
}

// migratedDB returns the URL of a fresh database with the schema applied:
// a copy of a template migrated once per test binary.
func migratedDB(t testing.TB) string {
	t.Helper()
	template.once.Do(func() {
		ctx := context.Background()
		u, _, err := srv.NewDatabase(ctx, "")
		if err != nil {
			template.err = err
			return
		}
		db, err := postgres.Open(ctx, u)
		if err != nil {
			template.err = err
			return
		}
		db.Close()
		p, _ := url.Parse(u)
		template.name = strings.TrimPrefix(p.Path, "/")
	})
	if template.err != nil {
		t.Fatal(template.err)
	}
	return srv.CreateDBFrom(t, template.name)
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
