package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestOpenAnalyzesACopiedDatabase: a database made with CREATE DATABASE ...
// TEMPLATE from one holding an organization's 2,000 devices starts without
// statistics (autovacuum would wait for rows to change); Open analyzes its
// tables, and the first page of the organization's devices is then read
// along the (org_id, created_at, id) index instead of by sorting them all.
func TestOpenAnalyzesACopiedDatabase(t *testing.T) {
	ctx := context.Background()
	src := migratedDB(t)
	db := openDB(t, src)
	org, err := db.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if _, _, err := db.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gw-%04d", i), SerialNumber: fmt.Sprintf("SN-%04d", i), Model: "IG-500"}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close() // CREATE DATABASE ... TEMPLATE wants no one connected
	p, _ := url.Parse(src)
	copied := srv.CreateDBFrom(t, strings.TrimPrefix(p.Path, "/"))

	db = openDB(t, copied)
	var cols int
	if err := db.Pool.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'devices'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols == 0 {
		t.Fatal("devices has no statistics after Open")
	}
	rows, err := db.Pool.Query(ctx, `EXPLAIN SELECT id FROM devices WHERE org_id = $1 ORDER BY created_at, id LIMIT 26`, org.ID)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if all := strings.Join(lines, "\n"); strings.Contains(all, "Sort") || !strings.Contains(all, "devices_org_created") {
		t.Errorf("first page of devices planned as\n%s\nwant an index scan on devices_org_created without a sort", all)
	}
}
