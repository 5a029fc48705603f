package sqlite_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestStore runs the shared store suite on a SQLite file.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now cloud.Now) storetest.Stores {
		return openStores(t, filepath.Join(t.TempDir(), "fleet.db"), now)
	})
}

func openStores(t testing.TB, path string, now cloud.Now) storetest.Stores {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	db.Now = now
	agent, err := sqlite.NewAgentStore(db, slog.New(slog.DiscardHandler))
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return storetest.Stores{
		Store:  db,
		Agent:  agent,
		Engine: sqlite.NewAlertEngineStore(db),
		Outbox: sqlite.NewWebhookStore(db),
		Panel:  sqlite.NewPanelStore(db),
		Reopen: func(t testing.TB) storetest.Stores { return openStores(t, path, now) },
		Close:  func() { agent.Close(); db.Close() },
	}
}
