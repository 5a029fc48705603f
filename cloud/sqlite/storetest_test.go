package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/dialects"
)

// TestStore runs the shared store suite on a SQLite file.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now cloud.Now) storetest.Stores {
		return openStores(t, filepath.Join(t.TempDir(), "fleet.db"), now)
	})
}

func openStores(t testing.TB, path string, now cloud.Now) storetest.Stores {
	t.Helper()
	return dialects.SQLiteAt(t, path, now)
}
