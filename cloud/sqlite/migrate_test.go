package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
)

// A database made before the stores shared one migration sequence holds
// the steps under the names SQLite recorded then (migrations/0020_...):
// it opens without running any of them again, records the steps it lacks
// (PostgreSQL's own ones, with nothing to do here), and serves.
func TestMigrateLegacyNames(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	steps := oldDatabase(t, path, func(m sqlstore.Migration) string { return m.Legacy }, "")
	legacy := 0
	for _, m := range steps {
		if m.Legacy != "" {
			legacy++
		}
	}
	if legacy != 6 {
		t.Fatalf("%d steps have a legacy SQLite name, want the 6 files SQLite had", legacy)
	}

	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("open a database of the old numbering: %v", err)
	}
	defer db.Close()
	var n int
	if err := db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(steps) {
		t.Errorf("%d migrations recorded, want %d (the %d old names and the steps SQLite lacked)", n, len(steps), legacy)
	}
	if _, err := db.CreateOrg(ctx, "acme"); err != nil {
		t.Errorf("create org on the migrated database: %v", err)
	}
	// Migrations run with foreign keys off (a rebuilt table): they are on
	// again for everything after.
	var fk int
	if err := db.W.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign keys after the migrations: %d, %v", fk, err)
	}
	if _, err := db.W.ExecContext(ctx, `INSERT INTO users (id, org_id, email, role, password_hash, created_at) VALUES ('u', 'nosuchorg', 'a@b.example', 'OWNER', 'h', 1)`); err == nil {
		t.Error("a user of no organization was stored: foreign keys are off")
	}
}

// A database whose alert rules are the six fixed ones (before migration
// 0012_rules) opens with them as ordinary rules, ids kept, and
// device_error added.
func TestMigrateRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	oldDatabase(t, path, func(m sqlstore.Migration) string {
		if m.Name < "0012" {
			return m.Name
		}
		return ""
	}, storetest.OldRulesSQL)
	storetest.CheckMigratedRules(t, openStores(t, path, nil).Stores)
}

// A claim made before migration 0018_claim_creator has no creator: a
// gateway claimed through it afterwards is recorded as the CLI's,
// "unknown".
func TestMigrateClaimCreator(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	oldDatabase(t, path, func(m sqlstore.Migration) string {
		if m.Name < "0018" {
			return m.Name
		}
		return ""
	}, storetest.OldClaimSQL(func(h string) string { return "X'" + h + "'" }))
	storetest.CheckOldClaimCreator(t, openStores(t, path, nil).Stores)
}

// A database whose users' emails were unique across the relay (before
// migration 0021) opens with every user, key and creator as they were,
// and an email now unique per organization only.
func TestMigrateEmailPerOrg(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	oldDatabase(t, path, func(m sqlstore.Migration) string {
		if m.Name < "0021" {
			return m.Name
		}
		return ""
	}, storetest.OldUsersSQL)
	storetest.CheckMigratedUsers(t, openStores(t, path, nil).Stores)
}

// oldDatabase makes at path a database of the steps of the sequence that
// record names (recorded under that name), then runs then, and returns the
// sequence.
func oldDatabase(t *testing.T, path string, record func(sqlstore.Migration) string, then string) []sqlstore.Migration {
	t.Helper()
	ctx := context.Background()
	steps, err := sqlstore.Migrations("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	old, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.ExecContext(ctx, `CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range steps {
		name := record(m)
		if name == "" {
			continue
		}
		if _, err := old.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("old schema %s: %v", name, err)
		}
		if _, err := old.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, 1)`, name); err != nil {
			t.Fatal(err)
		}
	}
	if then != "" {
		if _, err := old.ExecContext(ctx, then); err != nil {
			t.Fatal(err)
		}
	}
	return steps
}

// A device whose channels were stored one serial_channels row each (before
// migration 0027) opens with every channel's configuration and reported
// state as they were, now read from the device row.
func TestMigrateChannelReports(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	oldDatabase(t, path, func(m sqlstore.Migration) string {
		if m.Name < "0027" {
			return m.Name
		}
		return ""
	}, storetest.OldChannelsSQL(func(h string) string { return "X'" + h + "'" }, func(b bool) string { return map[bool]string{true: "1", false: "0"}[b] }))
	storetest.CheckMigratedChannels(t, openStores(t, path, nil).Stores)
}
