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
	url := newDatabase(t)
	steps := oldDatabase(t, url, func(m sqlstore.Migration) string {
		// The steps after 0008 came after the numbering was shared: no
		// legacy name, run on the old database when it opens.
		if m.SQL != "" && m.Legacy == "" && m.Name <= "0008" {
			t.Fatalf("step %s runs SQL on PostgreSQL but has no legacy name", m.Name)
		}
		return m.Legacy
	}, "")
	legacy := 0
	for _, m := range steps {
		if m.Legacy != "" {
			legacy++
		}
	}
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
	url := newDatabase(t)
	oldDatabase(t, url, func(m sqlstore.Migration) string {
		if m.Name < "0012" {
			return m.Name
		}
		return ""
	}, storetest.OldRulesSQL)
	storetest.CheckMigratedRules(t, openStores(t, url, nil, "relay-1").Stores)
}

// A claim made before migration 0018_claim_creator has no creator: a
// gateway claimed through it afterwards is recorded as the CLI's,
// "unknown".
func TestMigrateClaimCreator(t *testing.T) {
	url := newDatabase(t)
	oldDatabase(t, url, func(m sqlstore.Migration) string {
		if m.Name < "0018" {
			return m.Name
		}
		return ""
	}, storetest.OldClaimSQL(func(h string) string { return "decode('" + h + "', 'hex')" }))
	storetest.CheckOldClaimCreator(t, openStores(t, url, nil, "relay-1").Stores)
}

// A database whose users' emails were unique across the relay (before
// migration 0021) opens with every user, key and creator as they were,
// and an email now unique per organization only.
func TestMigrateEmailPerOrg(t *testing.T) {
	url := newDatabase(t)
	oldDatabase(t, url, func(m sqlstore.Migration) string {
		if m.Name < "0021" {
			return m.Name
		}
		return ""
	}, storetest.OldUsersSQL)
	storetest.CheckMigratedUsers(t, openStores(t, url, nil, "relay-1").Stores)
}

// newDatabase makes an empty database, dropped when the test ends.
func newDatabase(t *testing.T) string {
	t.Helper()
	url, drop, err := srv.NewDatabase(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop() })
	return url
}

// oldDatabase makes in the database at url the steps of the sequence that
// record names (recorded under that name), then runs then, and returns the
// sequence.
func oldDatabase(t *testing.T, url string, record func(sqlstore.Migration) string, then string) []sqlstore.Migration {
	t.Helper()
	ctx := context.Background()
	steps, err := sqlstore.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Exec(ctx, `CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range steps {
		name := record(m)
		if name == "" {
			continue
		}
		if _, err := old.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("old schema %s: %v", name, err)
		}
		if _, err := old.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, 1)`, name); err != nil {
			t.Fatal(err)
		}
	}
	if then != "" {
		if _, err := old.Exec(ctx, then); err != nil {
			t.Fatal(err)
		}
	}
	return steps
}

// A device whose channels were stored one serial_channels row each (before
// migration 0027) opens with every channel's configuration and reported
// state as they were, now read from the device row.
func TestMigrateChannelReports(t *testing.T) {
	url := newDatabase(t)
	oldDatabase(t, url, func(m sqlstore.Migration) string {
		if m.Name < "0027" {
			return m.Name
		}
		return ""
	}, storetest.OldChannelsSQL(func(h string) string { return "decode('" + h + "', 'hex')" }, func(b bool) string { return map[bool]string{true: "true", false: "false"}[b] }))
	storetest.CheckMigratedChannels(t, openStores(t, url, nil, "relay-1").Stores)
}
