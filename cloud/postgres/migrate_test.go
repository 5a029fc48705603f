package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/storetest"
)

// A database made before the stores shared one migration sequence holds
// the steps under the names PostgreSQL recorded then (0002_shared_outbox.sql
// ...): it opens without running any of them again, records the steps it
// lacks (SQLite's own ones, with nothing to do here), is ready, and
// serves.
func TestMigrateLegacyNames(t *testing.T) {
	ctx := context.Background()
	url, drop, err := srv.NewDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop() })
	steps, err := sqlstore.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(ctx, `CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	legacy := 0
	for _, m := range steps {
		// The steps after 0008 came after the numbering was shared: no
		// legacy name, run on the old database when it opens.
		if m.SQL != "" && m.Legacy == "" && m.Name <= "0008" {
			t.Fatalf("step %s runs SQL on PostgreSQL but has no legacy name", m.Name)
		}
		if m.Legacy == "" {
			continue
		}
		legacy++
		if _, err := old.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("old schema %s: %v", m.Legacy, err)
		}
		if _, err := old.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, 1)`, m.Legacy); err != nil {
			t.Fatal(err)
		}
	}
	old.Close(ctx)
	if legacy != 4 {
		t.Fatalf("%d steps have a legacy PostgreSQL name, want the 4 files PostgreSQL had", legacy)
	}

	db := openDB(t, url)
	if err := db.Ready(ctx); err != nil {
		t.Errorf("ready after opening a database of the old numbering: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(steps) {
		t.Errorf("%d migrations recorded, want %d (the %d old names and the steps PostgreSQL lacked)", n, len(steps), legacy)
	}
	if _, err := db.CreateOrg(ctx, "acme"); err != nil {
		t.Errorf("create org on the migrated database: %v", err)
	}
}

// A database whose alert rules are the six fixed ones (before migration
// 0012_rules) opens with them as ordinary rules, ids kept, and
// device_error added.
func TestMigrateRules(t *testing.T) {
	ctx := context.Background()
	url, drop, err := srv.NewDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop() })
	steps, err := sqlstore.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(ctx, `CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range steps {
		if m.Name >= "0012" {
			break
		}
		if _, err := old.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("old schema %s: %v", m.Name, err)
		}
		if _, err := old.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, 1)`, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Exec(ctx, storetest.OldRulesSQL); err != nil {
		t.Fatal(err)
	}
	old.Close(ctx)
	storetest.CheckMigratedRules(t, openStores(t, url, nil, "relay-1").Stores)
}
