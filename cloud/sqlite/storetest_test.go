package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestStore runs the shared store suite on a SQLite file.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now cloud.Now) (cloud.Stores, func(testing.TB) cloud.Stores) {
		path := filepath.Join(t.TempDir(), "fleet.db")
		reopen := func(t testing.TB) cloud.Stores { return openStores(t, path, now) }
		return reopen(t), reopen
	})
}

func openStores(t testing.TB, path string, now cloud.Now) cloud.Stores {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	db.Now = now
	return db.Stores()
}
